#include <memgrad/distributed/rank_classes.h>

#include <algorithm>
#include <map>

#include <memgrad/core/error.h>

namespace mg::distributed {

bool RankClass::contains(int64_t rank) const {
  auto it = std::upper_bound(ranks.begin(), ranks.end(), rank,
                             [](int64_t r, const std::pair<int64_t, int64_t>& in) { return r < in.first; });
  return it != ranks.begin() && rank <= std::prev(it)->second;
}

std::string RankClass::str() const {
  std::string s;
  const size_t shown = std::min<size_t>(ranks.size(), 6);
  for (size_t i = 0; i < shown; ++i) {
    const auto [a, b] = ranks[i];
    s += (i ? ", " : "") + std::to_string(a) + (b > a ? (b > a + 1 ? "-" : ", ") + std::to_string(b) : "");
  }
  if (shown < ranks.size()) s += ", ... (" + std::to_string(ranks.size() - shown) + " more ranges)";
  return s;
}

std::vector<RankClass> rank_classes(const std::vector<int64_t>& numel, const std::vector<size_t>& unit, int stage,
                                    int64_t world) {
  MG_CHECK(world >= 1 && stage >= 0 && stage <= 3, ValueError,
           "rank_classes: expected a world size >= 1 and a ZeRO stage 0-3, got ", world, " and ", stage);
  MG_CHECK(stage != 3 || unit.size() == numel.size(), ValueError, "rank_classes: expected a unit for each of the ",
           numel.size(), " parameters, got ", unit.size());
  const size_t n = numel.size();
  // Stages 1-2: parameter j alone, in slices of ceil(n / N). Stage 3: its place in its unit, whose
  // chunk is ceil(elements / N) (at least 1: a unit is padded to a multiple of N).
  std::vector<int64_t> offset(n, 0), chunk(n, 1);
  if (stage == 3) {
    std::map<size_t, int64_t> total;
    for (size_t j = 0; j < n; ++j) offset[j] = total[unit[j]], total[unit[j]] += numel[j];
    for (size_t j = 0; j < n; ++j) chunk[j] = std::max<int64_t>(1, (total[unit[j]] + world - 1) / world);
  } else {
    for (size_t j = 0; j < n; ++j) chunk[j] = std::max<int64_t>(1, (numel[j] + world - 1) / world);
  }
  auto length = [&](size_t j, int64_t r) -> int64_t {
    if (stage == 0) return numel[j];
    const int64_t c = chunk[j], o = offset[j];
    const int64_t begin = std::clamp(r * c - o, int64_t(0), numel[j]);
    const int64_t end = std::clamp((r + 1) * c - o, int64_t(0), numel[j]);
    return std::max<int64_t>(0, end - begin);
  };
  // A parameter's length changes only at the ranks whose chunk holds its first or its end element.
  std::vector<int64_t> cuts{0, world};
  if (stage > 0)
    for (size_t j = 0; j < n; ++j)
      for (int64_t x : {offset[j], offset[j] + numel[j]}) {
        const int64_t q = x / chunk[j];
        for (int64_t cut : {q, q + 1})
          if (cut > 0 && cut < world) cuts.push_back(cut);
      }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<RankClass> classes;
  std::map<std::vector<int64_t>, size_t> index;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const int64_t a = cuts[i], b = cuts[i + 1];
    std::vector<int64_t> key;
    for (size_t j = 0; j < n; ++j)
      if (const int64_t l = length(j, a)) key.push_back(l);
    auto [it, fresh] = index.try_emplace(key, classes.size());
    if (fresh) classes.push_back(RankClass{{}, 0, key});
    RankClass& c = classes[it->second];
    if (!c.ranks.empty() && c.ranks.back().second + 1 == a)
      c.ranks.back().second = b - 1;
    else
      c.ranks.emplace_back(a, b - 1);
    c.count += b - a;
  }
  return classes;
}

}  // namespace mg::distributed
