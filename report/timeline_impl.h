// What the timeline page is made from (private to report/): one device's recorded history with the
// allocator's layout at its end, from the live allocator or read back from a snapshot file.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <memgrad/core/memory.h>
#include <memgrad/core/memory/snapshot_impl.h>

namespace mg::memory::detail {

struct Recording {
  std::string title;
  std::string source;  // the snapshot's file name ("" when live)
  Device device;
  std::vector<MemoryEvent> events;                     // of `device`, oldest first
  std::vector<size_t> index;                           // each event's place in the whole history (all devices)
  std::vector<SegmentInfo> segments;                   // the allocator's layout right after the last event
  int64_t limit = 0;                                   // the device's memory limit (0: none)
  std::shared_ptr<const Fragmentation> fragmentation;  // the forensics at the end (none from a version 2 snapshot)
  // Fields of the snapshot's device entry and of its segments that the page does not interpret,
  // as JSON objects: the segment view lists them as they are (the format grows by adding fields).
  std::string device_extras = "{}";
  std::vector<std::string> segment_extras;
};

// `d`'s history and layout now.
Recording current_recording(const Device& d, const std::string& title);
// The recording of `device` ("": the device with the most allocations) in the snapshot at `path`,
// checked field by field. Throws IOError "<path>: <what is wrong>" (one line).
Recording read_recording(const std::string& path, const std::string& device);

// The page's data for one recording, as JSON (the fields are described in timeline_data.cpp).
// Replays the history backwards from the final layout, so that every byte at every instant has
// a known block; throws ValueError naming the event where the numbers stop adding up.
std::string timeline_data(const Recording& r);

// The page's template (timeline.html with timeline.css and the timeline*.js files inlined at
// build time); the data goes where it says MG_TIMELINE_DATA.
extern const char* const kTimelinePage;

}  // namespace mg::memory::detail
