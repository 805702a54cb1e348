// write_memory_timeline: the recorded history of one device as a self-contained HTML page. The
// chart is inline SVG drawn here (no scripts, no network): allocated bytes after each event,
// stacked by category, reserved bytes as a dashed line, annotations and OOMs marked, the peak
// marked and its breakdown by category and owner listed below.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>

namespace mg {

namespace {

const char* kColors[kNumCategories] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                       "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

std::string escape(const std::string& s) {
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

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool changes_ledger(MemoryEventKind k) {
  return k == MemoryEventKind::Alloc || k == MemoryEventKind::Free || k == MemoryEventKind::Relabel;
}

// Live bytes per owner right after event `upto`, replayed from the history; bytes allocated
// before recording started and still live are listed as one entry.
std::vector<std::pair<int64_t, std::string>> owners_after(const std::vector<MemoryEvent>& ev, size_t upto) {
  std::unordered_map<uint64_t, std::pair<std::string, int64_t>> live;
  for (size_t i = 0; i <= upto && i < ev.size(); ++i) {
    const auto& e = ev[i];
    if (e.kind == MemoryEventKind::Alloc)
      live[e.address] = {e.owner, e.bytes};
    else if (e.kind == MemoryEventKind::Free)
      live.erase(e.address);
  }
  std::map<std::string, int64_t> by_owner;
  int64_t known = 0;
  for (auto& [addr, ob] : live) by_owner[ob.first.empty() ? "(no owner)" : ob.first] += ob.second, known += ob.second;
  std::vector<std::pair<int64_t, std::string>> r;
  for (auto& [o, n] : by_owner) r.emplace_back(n, o);
  if (upto < ev.size() && ev[upto].allocated > known)
    r.emplace_back(ev[upto].allocated - known, "(allocated before recording started)");
  std::sort(r.rbegin(), r.rend());
  return r;
}

}  // namespace

void write_memory_timeline(const std::string& path, const Device& d, const std::string& title_in) {
  std::vector<MemoryEvent> all = memory_history(), ev;
  for (auto& e : all)
    if (e.device == d) ev.push_back(std::move(e));
  // Points of the chart: events that change the ledger. Marks: annotations and OOMs at their place.
  std::vector<size_t> points;
  std::vector<std::pair<size_t, const MemoryEvent*>> marks;  // (point index, event)
  // What a memory budget did (core/budget.h): a row of ticks per kind under the chart.
  const MemoryEventKind budget_kinds[] = {MemoryEventKind::Evict, MemoryEventKind::Remat, MemoryEventKind::Offload,
                                          MemoryEventKind::Fetch};
  std::vector<std::pair<size_t, int>> budget_marks;  // (point index, row)
  int64_t budget_counts[4] = {};
  for (size_t i = 0; i < ev.size(); ++i) {
    if (changes_ledger(ev[i].kind))
      points.push_back(i);
    else if (ev[i].kind == MemoryEventKind::Annotation || ev[i].kind == MemoryEventKind::Oom)
      marks.emplace_back(points.size(), &ev[i]);
    for (int r = 0; r < 4; ++r)
      if (ev[i].kind == budget_kinds[r]) budget_marks.emplace_back(points.size(), r), ++budget_counts[r];
  }
  const std::string title = title_in.empty() ? "memgrad memory timeline (" + d.str() + ")" : title_in;

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << escape(title) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:20px;color:#222}table{border-collapse:collapse;margin-right:40px}"
       "td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #ddd}td:first-child,th:first-child{text-align:"
       "left}.tables{display:flex;align-items:flex-start}.sw{display:inline-block;width:12px;height:12px;margin-right:"
       "6px;vertical-align:middle}</style>\n</head><body>\n<h2>"
    << escape(title) << "</h2>\n";
  if (points.empty()) {
    h << "<p>No allocation events were recorded on " << d.str()
      << ". Call <code>mg::record_history(true)</code> before the step you want to see.</p>\n";
  } else {
    // The peak of allocated bytes among the recorded events (the first event that reaches it).
    size_t peak = points[0];
    for (size_t p : points)
      if (ev[p].allocated > ev[peak].allocated) peak = p;
    size_t peak_point = size_t(std::find(points.begin(), points.end(), peak) - points.begin());
    // Downsample to at most ~1500 buckets, keeping in each the event with the most bytes (the peak survives).
    const size_t max_buckets = 1500;
    std::vector<size_t> shown;  // indices into points
    size_t per = (points.size() + max_buckets - 1) / max_buckets;
    for (size_t b = 0; b < points.size(); b += per) {
      size_t best = b;
      for (size_t k = b; k < std::min(points.size(), b + per); ++k)
        if (ev[points[k]].allocated > ev[points[best]].allocated) best = k;
      if (b <= peak_point && peak_point < b + per) best = peak_point;
      shown.push_back(best);
    }
    int64_t ymax = 1;
    for (size_t p : points) ymax = std::max({ymax, ev[p].allocated, ev[p].reserved});
    const double X0 = 90, Y0 = 30, W = 1000, H = 460;
    const double n = double(points.size());
    auto x_of = [&](double i) { return X0 + W * i / n; };
    auto y_of = [&](double v) { return Y0 + H - H * v / double(ymax) * 0.95; };

    h << "<p>" << points.size() << " allocation events on " << d.str() << "; peak <b>"
      << format_bytes(ev[peak].allocated) << "</b> allocated at event " << peak_point;
    std::string what = ev[peak].op.empty() || ev[peak].owner.empty() ? ev[peak].op + ev[peak].owner
                                                                     : ev[peak].op + " for " + ev[peak].owner;
    if (!what.empty()) h << " (" << escape(what) << ")";
    h << ".</p>\n";
    if (!budget_marks.empty())
      h << "<p>Memory budget: " << budget_counts[0] << " evictions, " << budget_counts[1] << " rematerializations, "
        << budget_counts[2] << " offloads, " << budget_counts[3] << " fetches (ticks under the chart).</p>\n";
    h << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1300\" height=\"" << (budget_marks.empty() ? 540 : 600)
      << "\" font-size=\"12\">\n";
    // Stacked step areas, one polygon per category: top edge forward, bottom edge back.
    for (int c = 0; c < kNumCategories; ++c) {
      std::string top, bottom;
      for (size_t k = 0; k < shown.size(); ++k) {
        const auto& e = ev[points[shown[k]]];
        int64_t below = 0;
        for (int j = 0; j < c; ++j) below += e.by_category[size_t(j)];
        int64_t above = below + e.by_category[size_t(c)];
        double xa = x_of(double(k * per)), xb = x_of(double(std::min(points.size(), (k + 1) * per)));
        top += num(xa) + "," + num(y_of(double(above))) + " " + num(xb) + "," + num(y_of(double(above))) + " ";
        bottom =
            num(xb) + "," + num(y_of(double(below))) + " " + num(xa) + "," + num(y_of(double(below))) + " " + bottom;
      }
      h << "<polygon fill=\"" << kColors[c] << "\" stroke=\"none\" points=\"" << top << bottom << "\"/>\n";
    }
    std::string reserved;
    for (size_t k = 0; k < shown.size(); ++k) {
      double yr = y_of(double(ev[points[shown[k]]].reserved));
      reserved += num(x_of(double(k * per))) + "," + num(yr) + " " +
                  num(x_of(double(std::min(points.size(), (k + 1) * per)))) + "," + num(yr) + " ";
    }
    h << "<polyline fill=\"none\" stroke=\"#555\" stroke-dasharray=\"5,4\" points=\"" << reserved << "\"/>\n";
    // Axes with byte ticks.
    h << "<line x1=\"" << X0 << "\" y1=\"" << Y0 + H << "\" x2=\"" << X0 + W << "\" y2=\"" << Y0 + H
      << "\" stroke=\"#222\"/><line x1=\"" << X0 << "\" y1=\"" << Y0 << "\" x2=\"" << X0 << "\" y2=\"" << Y0 + H
      << "\" stroke=\"#222\"/>\n";
    for (int t = 0; t <= 5; ++t) {
      double v = double(ymax) / 0.95 * t / 5;
      double y = y_of(v);
      h << "<line x1=\"" << X0 - 4 << "\" y1=\"" << num(y) << "\" x2=\"" << X0 + W << "\" y2=\"" << num(y)
        << "\" stroke=\"#ddd\"/><text x=\"" << X0 - 8 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
        << format_bytes(int64_t(v)) << "</text>\n";
      double x = x_of(n * t / 5);
      h << "<text x=\"" << num(x) << "\" y=\"" << Y0 + H + 18 << "\" text-anchor=\"middle\">" << int64_t(n * t / 5)
        << "</text>\n";
    }
    h << "<text x=\"" << X0 + W / 2 << "\" y=\"" << Y0 + H + 36 << "\" text-anchor=\"middle\">event</text>\n";
    for (auto& [p, e] : marks) {
      bool oom = e->kind == MemoryEventKind::Oom;
      double x = x_of(double(p));
      h << "<line x1=\"" << num(x) << "\" y1=\"" << Y0 << "\" x2=\"" << num(x) << "\" y2=\"" << Y0 + H << "\" stroke=\""
        << (oom ? "#d00" : "#888") << "\" stroke-dasharray=\"2,3\"/><text x=\"" << num(x + 3) << "\" y=\"" << Y0 + 12
        << "\" fill=\"" << (oom ? "#d00" : "#444") << "\">" << escape(oom ? "OOM " + format_bytes(e->bytes) : e->note)
        << "</text>\n";
    }
    const char* budget_colors[] = {"#e67e22", "#27ae60", "#2980b9", "#8e44ad"};
    const char* budget_names[] = {"evict", "remat", "offload", "fetch"};
    for (int r = 0; r < 4 && !budget_marks.empty(); ++r)
      h << "<text x=\"" << X0 - 8 << "\" y=\"" << Y0 + H + 52 + 11 * r << "\" text-anchor=\"end\" font-size=\"10\">"
        << budget_names[r] << "</text>\n";
    for (auto& [p, r] : budget_marks) {
      double x = x_of(double(p)), y = Y0 + H + 44 + 11 * r;
      h << "<line x1=\"" << num(x) << "\" y1=\"" << num(y) << "\" x2=\"" << num(x) << "\" y2=\"" << num(y + 9)
        << "\" stroke=\"" << budget_colors[r] << "\"/>";
    }
    if (!budget_marks.empty()) h << "\n";
    double px = x_of(double(peak_point) + 0.5), py = y_of(double(ev[peak].allocated));
    h << "<line x1=\"" << num(px) << "\" y1=\"" << num(py - 12) << "\" x2=\"" << num(px) << "\" y2=\"" << Y0 + H
      << "\" stroke=\"#000\" stroke-width=\"1.5\"/><circle cx=\"" << num(px) << "\" cy=\"" << num(py)
      << "\" r=\"4\" fill=\"#000\"/><text x=\"" << num(px + 6) << "\" y=\"" << num(py - 6) << "\" font-weight=\"bold\">"
      << "peak " << format_bytes(ev[peak].allocated) << "</text>\n";
    // Legend.
    for (int c = 0; c < kNumCategories; ++c) {
      double y = Y0 + 20 + 22 * c;
      h << "<rect x=\"" << X0 + W + 30 << "\" y=\"" << y - 10 << "\" width=\"14\" height=\"14\" fill=\"" << kColors[c]
        << "\"/><text x=\"" << X0 + W + 50 << "\" y=\"" << y + 2 << "\">" << category_name(Category(c)) << "</text>\n";
    }
    double ly = Y0 + 20 + 22 * kNumCategories;
    h << "<line x1=\"" << X0 + W + 30 << "\" y1=\"" << ly - 3 << "\" x2=\"" << X0 + W + 44 << "\" y2=\"" << ly - 3
      << "\" stroke=\"#555\" stroke-dasharray=\"5,4\"/><text x=\"" << X0 + W + 50 << "\" y=\"" << ly + 2
      << "\">reserved</text>\n</svg>\n";

    // The breakdown at the peak.
    const auto& pk = ev[peak];
    h << "<h3>At the peak: " << format_bytes(pk.allocated) << " allocated, " << format_bytes(pk.reserved)
      << " reserved</h3>\n<div class=\"tables\"><table><tr><th>Category</th><th>Bytes</th><th>Share</th></tr>\n";
    for (int c = 0; c < kNumCategories; ++c) {
      int64_t v = pk.by_category[size_t(c)];
      h << "<tr><td><span class=\"sw\" style=\"background:" << kColors[c] << "\"></span>" << category_name(Category(c))
        << "</td><td>" << format_bytes(v) << "</td><td>"
        << num(pk.allocated ? 100.0 * double(v) / double(pk.allocated) : 0) << " %</td></tr>\n";
    }
    h << "<tr><th>Total</th><th>" << format_bytes(pk.allocated) << "</th><th></th></tr></table>\n";
    h << "<table><tr><th>Owner</th><th>Bytes</th></tr>\n";
    auto owners = owners_after(ev, peak);
    for (size_t i = 0; i < std::min<size_t>(15, owners.size()); ++i)
      h << "<tr><td>" << escape(owners[i].second) << "</td><td>" << format_bytes(owners[i].first) << "</td></tr>\n";
    h << "</table></div>\n";
  }
  h << "<p style=\"color:#777\">Bytes are requests rounded up to 512 B, as counted by the ledger. Written by "
       "memgrad.</p>\n</body></html>\n";
  std::ofstream f(path);
  MG_CHECK(f.good(), IOError, "write_memory_timeline: expected a writable file, could not open \"", path, "\"");
  f << h.str();
  MG_CHECK(f.good(), IOError, "write_memory_timeline: writing \"", path, "\" failed");
}

}  // namespace mg
