// The files one `memgrad train` reads and writes, checked together before any work.
#pragma once
#include "train.h"

namespace memgrad_cli {

// Throws UsageError unless every output of `f` (--save, --log, --timeline, --snapshot) can be written
// (check_writable), no two of them are one file, and none is a file the run reads (a --data or
// --val-data file, --resume), which writing would truncate or replace while it is read; --save may
// name --resume's file (the run continues its state and replaces it at the end).
void check_run_files(const TrainFlags& f);

}  // namespace memgrad_cli
