// The memory timeline page: one HTML file, no network, that draws a recorded history (record_history)
// or snapshots (dump_snapshot) of core's ledger and allocator. Its parts (timeline.html, .css and the
// timeline_*.js files beside this header) are compiled in as one string at build time; `memgrad view`
// writes it from snapshots. The floor above core: core keeps the ledger, the allocator, the history
// and the snapshot writer, and knows nothing of this page.
#pragma once
#include <string>
#include <vector>

#include <memgrad/core/memory.h>

namespace mg {

namespace memory {
// Writes the interactive timeline of `d`'s recorded history (record_history) as one HTML file that
// needs no network: allocated bytes stacked by category over the events, steps, phases, the peak
// and OOMs marked; hover shows the allocation under the cursor, a click the breakdown by category
// and by owner at that instant and the allocator's segments; zoom and pan. Recording must have
// been on while the history was made and still be on (the page starts from the allocator's state
// now, and goes back through the history).
void write_timeline(const std::string& path, const Device& d = kCPU, const std::string& title = "");
// The same page from snapshots (dump_snapshot): one, or two compared on one time axis with their
// difference by category. `device` picks the device of each snapshot ("": the one with the most
// recorded allocations). A file that is not a valid snapshot of this version, or whose numbers do
// not add up, raises IOError with one line naming the file and what is wrong.
void write_snapshot_timeline(const std::string& path, const std::vector<std::string>& snapshots,
                             const std::string& device = "");
}  // namespace memory

}  // namespace mg
