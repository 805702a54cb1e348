// memory::write_timeline: the interactive timeline page, one HTML file that needs no network. Its
// template (timeline.html, .css and the timeline_*.js files beside this one) is compiled in at build
// time; what is written here is the data: one or two recordings, from timeline_data.
#include <string>

#include <memgrad/core/error.h>
#include <memgrad/core/files.h>
#include <memgrad/core/memory.h>
#include <memgrad/report/timeline.h>
#include <memgrad/report/timeline_impl.h>

namespace mg::memory {

namespace {

std::string escape_html(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '<':
        r += "&lt;";
        break;
      case '>':
        r += "&gt;";
        break;
      case '&':
        r += "&amp;";
        break;
      case '"':
        r += "&quot;";
        break;
      default:
        r += c;
    }
  }
  return r;
}

// The template with each marker replaced by its text; what is put in is not searched again.
std::string fill(const std::string& page, const std::vector<std::pair<std::string, std::string>>& with) {
  std::string r;
  size_t at = 0;
  while (true) {
    size_t next = std::string::npos, which = 0;
    for (size_t k = 0; k < with.size(); ++k) {
      const size_t f = page.find(with[k].first, at);
      if (f < next) next = f, which = k;
    }
    if (next == std::string::npos) return r + page.substr(at);
    r += page.substr(at, next - at) + with[which].second;
    at = next + with[which].first.size();
  }
}

// The page for `runs` (JSON from timeline_data), written to `path`.
void write_page(const std::string& path, const std::string& title, const std::vector<std::string>& runs) {
  std::string data = "{\"categories\":[";
  for (int c = 0; c < kNumCategories; ++c) data += std::string(c ? "," : "") + "\"" + category_name(Category(c)) + "\"";
  data += "],\"runs\":[";
  for (size_t i = 0; i < runs.size(); ++i) data += (i ? "," : "") + runs[i];
  data += "]}";
  const std::string page =
      fill(detail::kTimelinePage, {{"MG_TIMELINE_TITLE", escape_html(title)}, {"MG_TIMELINE_DATA", data}});
  write_file_atomically(path, page, "write_timeline");  // core/files.h: whole or not at all
}

std::string base_name(const std::string& path) { return path.substr(path.find_last_of('/') + 1); }

}  // namespace

void write_timeline(const std::string& path, const Device& d, const std::string& title) {
  const std::string t = title.empty() ? "memgrad memory timeline (" + d.str() + ")" : title;
  std::string run;
  try {
    run = detail::timeline_data(detail::current_recording(d, t));
  } catch (const ValueError& e) {  // the live history and the allocator disagree: a bug, or another thread
    throw Error(std::string("write_timeline: the history of ") + d.str() +
                " does not match its allocator (was record_history on all along, with no other thread allocating "
                "on it?): " +
                e.what());
  }
  write_page(path, t, {run});
}

void write_snapshot_timeline(const std::string& path, const std::vector<std::string>& snapshots,
                             const std::string& device) {
  MG_CHECK(snapshots.size() == 1 || snapshots.size() == 2, ValueError,
           "write_snapshot_timeline: expected one snapshot, or two to compare, got ", snapshots.size());
  std::vector<std::string> runs;
  std::string title;
  for (const std::string& file : snapshots) {
    detail::Recording r = detail::read_recording(file, device);
    r.source = base_name(file);
    if (r.title.empty()) r.title = r.source;
    title = snapshots.size() == 1 ? r.title : title.empty() ? r.source : title + " vs " + r.source;
    try {
      runs.push_back(detail::timeline_data(r));
    } catch (const ValueError& e) {
      throw IOError(file + ": " + e.what());
    }
  }
  write_page(path, snapshots.size() == 1 ? title : "Memory timelines compared: " + title, runs);
}

}  // namespace mg::memory
