// The snapshot's JSON pieces (private): written by dump_snapshot (core/memory/snapshot.cpp) and
// read back, with the live allocator's layout, by the timeline page (report/).
#pragma once
#include <nlohmann/json.hpp>

#include <memgrad/core/memory.h>

namespace mg::memory::detail {

// The snapshot's entry of device `d` (stats, segments and their blocks, the fragmentation forensics
// now), as dump_snapshot writes it.
nlohmann::json device_json(const Device& d);
// Fragmentation forensics as the snapshot stores them (docs/memory.md lists the fields).
nlohmann::json fragmentation_json(const Fragmentation& f);

}  // namespace mg::memory::detail
