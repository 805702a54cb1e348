// The embedded training text: a few public-domain sonnets, so `memgrad train` needs no download.
#pragma once

namespace memgrad_cli {
extern const char* const kCorpus;
}
