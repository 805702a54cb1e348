#include "view.h"

#include <cstdio>

#include <CLI/CLI.hpp>

#include "paths.h"

namespace memgrad_cli {

namespace {

std::string stem(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

}  // namespace

void add_view_flags(CLI::App& app, ViewFlags& f) {
  app.add_option("snapshots", f.snapshots,
                 "a memory snapshot (memgrad train --snapshot, mg::dump_snapshot), or two to compare")
      ->required()
      ->expected(1, 2)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw)  // a third is an error, not a choice
      ->check(input_file());
  app.add_option("-o,--out", f.out, "the HTML page to write (default: SNAPSHOT.html, or A-vs-B.html)")
      ->check(non_empty("a file name"));
  app.add_option("--device", f.device, "the device to draw (default: the one with the most allocations)");
}

int run_view(const ViewFlags& f) {
  const std::string out = !f.out.empty()            ? f.out
                          : f.snapshots.size() == 1 ? stem(f.snapshots[0]) + ".html"
                                                    : stem(f.snapshots[0]) + "-vs-" + stem(f.snapshots[1]) + ".html";
  check_writable("--out", out);
  for (const std::string& snapshot : f.snapshots)  // a snapshot named x.html was replaced by its own page
    check_not_input("--out", out, "the snapshot", snapshot);
  mg::memory::write_snapshot_timeline(out, f.snapshots, f.device);
  std::printf("memory timeline: %s\n", out.c_str());
  return 0;
}

void write_memory_files(const std::string& timeline, const std::string& snapshot, const mg::Device& d,
                        const std::string& title) {
  if (!timeline.empty()) mg::memory::write_timeline(timeline, d, title);
  if (!snapshot.empty()) mg::dump_snapshot(snapshot, title);
}

}  // namespace memgrad_cli
