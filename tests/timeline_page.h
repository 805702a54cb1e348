// The data inside a memory timeline page (memory::write_timeline), decoded as the page's script
// decodes it, so that C++ tests can check what the page will show against the ledger.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace timeline_page {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The JSON the page draws (the text of its <script id="mg-data">).
inline nlohmann::json data(const std::string& html) {
  const std::string open = "<script id=\"mg-data\" type=\"application/json\">";
  const size_t from = html.find(open), to = html.find("</script>", from);
  if (from == std::string::npos || to == std::string::npos) return nullptr;
  return nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()));
}

// An array the page stores as differences from the previous entry, summed up.
inline std::vector<int64_t> sums(const nlohmann::json& deltas) {
  std::vector<int64_t> r;
  int64_t v = 0;
  for (auto& d : deltas) r.push_back(v += d.get<int64_t>());
  return r;
}

// Bytes per owner and per category of the blocks live at point `p` of `run`.
struct Breakdown {
  std::map<std::string, int64_t> by_owner;
  std::vector<int64_t> by_category = std::vector<int64_t>(8);
};
inline Breakdown breakdown(const nlohmann::json& run, int64_t p) {
  const auto& b = run["blocks"];
  const auto& c = run["changes"];
  Breakdown r;
  const size_t n = b["start"].size(), changes = c["point"].size();
  for (size_t i = 0; i < n; ++i) {
    if (b["start"][i].get<int64_t>() > p || p >= b["end"][i].get<int64_t>()) continue;
    size_t k = b["change"][i].get<size_t>();
    const size_t end = i + 1 < n ? b["change"][i + 1].get<size_t>() : changes;
    while (k + 1 < end && c["point"][k + 1].get<int64_t>() <= p) ++k;
    const int64_t bytes = b["bytes"][i].get<int64_t>();
    r.by_owner[run["strings"][c["owner"][k].get<size_t>()].get<std::string>()] += bytes;
    r.by_category[c["cat"][k].get<size_t>()] += bytes;
  }
  return r;
}

}  // namespace timeline_page
