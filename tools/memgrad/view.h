// `memgrad view`: the interactive memory timeline page of a snapshot, or of two compared; and the
// memory files `memgrad train` writes (--timeline, --snapshot).
#pragma once
#include <string>
#include <vector>

#include "options.h"

namespace memgrad_cli {

struct ViewFlags {
  std::vector<std::string> snapshots;  // one, or two to compare
  std::string out;                     // default: the first snapshot's name with .html (A-vs-B.html for two)
  std::string device;                  // "": each snapshot's device with the most allocations
};

void add_view_flags(CLI::App& app, ViewFlags& f);
int run_view(const ViewFlags& f);

// What `memgrad train` recorded so far on `d`: the timeline page at `timeline` and the snapshot
// (JSON, for `memgrad view`) at `snapshot`; an empty path writes nothing.
void write_memory_files(const std::string& timeline, const std::string& snapshot, const mg::Device& d,
                        const std::string& title);

}  // namespace memgrad_cli
