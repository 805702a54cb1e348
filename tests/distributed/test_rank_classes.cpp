// Classes of ranks (distributed/rank_classes.h): the ranks whose slices (ZeRO-1/2) or pieces (ZeRO-3)
// have the same lengths, computed without a loop over ranks, agree with what DataParallel gives each
// rank; and ranks past every parameter's last element still get an optimizer (an empty slice).
#include <doctest/doctest.h>

#include <memgrad/memgrad.h>

using namespace mg;
namespace dist = mg::distributed;

namespace {

struct Model {
  std::vector<int64_t> numel;
  std::vector<size_t> unit;  // ZeRO-3: a unit per parameter
};

// What DataParallel gives rank `rank` of `world` at `stage`: its non-empty slices' or pieces' lengths
// (stage 0: every parameter whole).
std::vector<int64_t> lengths_of(const Model& m, int stage, int world, int rank) {
  if (stage == 0) return m.numel;
  nn::NamedTensors params;
  std::vector<std::string> units;
  for (size_t j = 0; j < m.numel.size(); ++j) {
    const std::string unit = "u" + std::to_string(m.unit.empty() ? 0 : m.unit[j]);
    if (stage == 3 && m.unit[j] > 0 && std::find(units.begin(), units.end(), unit) == units.end())
      units.push_back(unit);  // unit 0 is the root: named by no path
    params.emplace_back((stage == 3 && m.unit[j] > 0 ? unit : std::string("root")) + ".p" + std::to_string(j),
                        zeros({m.numel[j]}, kMeta).requires_grad_());
  }
  auto group = dist::simulated_group(rank, world);
  dist::DataParallel dp(params, *group, dist::DataParallelOptions().zero_stage(stage).units(units));
  std::vector<int64_t> r;
  for (size_t j = 0; j < params.size(); ++j)
    if (const auto [begin, end] = dp.slice(j, rank); end > begin) r.push_back(end - begin);
  return r;
}

}  // namespace

TEST_CASE("rank classes: every rank's class holds the lengths DataParallel gives it, at every stage") {
  const std::vector<Model> models = {
      {{10, 3, 7, 1, 64}, {1, 1, 0, 2, 2}},
      {{128, 128, 4096, 33, 5}, {0, 1, 1, 1, 0}},
      {{1}, {0}},
  };
  for (const Model& m : models)
    for (int stage : {0, 1, 2, 3})
      for (int world : {1, 2, 3, 5, 8, 70}) {
        INFO("stage ", stage, ", ", world, " ranks, ", m.numel.size(), " parameters");
        const std::vector<dist::RankClass> classes = dist::rank_classes(m.numel, m.unit, stage, world);
        int64_t counted = 0;
        for (const auto& c : classes) counted += c.count;
        CHECK(counted == world);
        CHECK(classes.front().first() == 0);
        for (int r = 0; r < world; ++r) {
          INFO("rank ", r);
          int in = 0;
          for (const auto& c : classes)
            if (c.contains(r)) {
              ++in;
              CHECK(c.lengths == lengths_of(m, stage, world, r));
            }
          CHECK(in == 1);
        }
      }
}

TEST_CASE("rank classes: 2^20 ranks make a handful of classes; a rank with nothing keeps an empty slice") {
  const std::vector<int64_t> numel = {50257 * 768, 768, 768, 3 * 768 * 768};
  const std::vector<size_t> unit = {0, 0, 1, 1};
  for (int stage : {1, 2, 3}) {
    const auto classes = dist::rank_classes(numel, unit, stage, int64_t(1) << 20);
    CHECK(classes.size() <= 12);
    int64_t counted = 0;
    for (const auto& c : classes) counted += c.count;
    CHECK(counted == int64_t(1) << 20);
  }
  // More ranks than elements: the last rank holds no element of any parameter, and its optimizer
  // still has a parameter (torch refuses an empty list), which gets no gradient.
  nn::Linear fc(2, 2, true, TensorOptions(kMeta));
  for (int stage : {1, 2, 3}) {
    INFO("stage ", stage);
    auto group = dist::simulated_group(99, 100);
    dist::DataParallel dp(fc.named_parameters(), *group, dist::DataParallelOptions().zero_stage(stage));
    const nn::NamedTensors mine = dp.optimizer_parameters();
    REQUIRE(mine.size() == 1);
    CHECK(mine[0].second.numel() == 0);
    optim::AdamW opt(mine);  // not an empty parameter list
  }
}
