// The files one `memgrad train` reads and writes, checked together before any work.
#pragma once
#include "train.h"

namespace memgrad_cli {

// Throws UsageError unless every output of `f` (--save, --log, --timeline, --snapshot) can be written
// (check_writable), no two of them are one file, and none is a file the run reads (a --data or
// --val-data file, --resume, a --plan file), which writing would truncate or replace while it is read;
// --save may name --resume's file (the run continues its state and replaces it at the end).
void check_run_files(const TrainFlags& f);

// Throws UsageError when the output `out` (written by `out_flag`) is the file `in` (read as `in_flag`),
// however each is named (a link, a second hard link, ./name).
void check_not_input(const std::string& out_flag, const std::string& out, const std::string& in_flag,
                     const std::string& in);

// Throws UsageError when two outputs are one file (the second written would replace the first).
void check_apart(const std::string& flag_a, const std::string& a, const std::string& flag_b, const std::string& b);

}  // namespace memgrad_cli
