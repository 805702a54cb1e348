// Process groups: every collective over MPI checked against values each rank can compute alone
// ([mpi], under mpirun -np 2), argument errors (typed, nothing leaked), meta tensors, and the
// simulated group the planner uses.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include <memgrad/memgrad.h>

using namespace mg;
namespace dist = mg::distributed;

namespace {
int64_t cpu_allocated() { return memory_stats(kCPU).allocated; }
}  // namespace

TEST_CASE("process group [mpi]: all_reduce sums, maxes and mins in every dtype") {
  dist::ProcessGroup& g = dist::world();
  const int r = g.rank(), n = g.size();
  REQUIRE(g.backend() == "mpi");
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    INFO(dtype_name(dt));
    // Element i of rank r holds (r + 1) * (i + 1): small integers, exact in every dtype.
    std::vector<double> v;
    for (int i = 0; i < 5; ++i) v.push_back(double((r + 1) * (i + 1)));
    Tensor sum = tensor(v, {5}).to(dt), mx = sum.clone(), mn = sum.clone();
    g.all_reduce(sum).wait();
    g.all_reduce(mx, dist::ReduceOp::Max).wait();
    g.all_reduce(mn, dist::ReduceOp::Min).wait();
    for (int i = 0; i < 5; ++i) {
      CHECK(sum.to_vector<double>()[size_t(i)] == double(n * (n + 1) / 2 * (i + 1)));
      CHECK(mx.to_vector<double>()[size_t(i)] == double(n * (i + 1)));
      CHECK(mn.to_vector<double>()[size_t(i)] == double(i + 1));
    }
  }
}

TEST_CASE("process group [mpi]: reduce_scatter, all_gather (also in place), broadcast, barrier") {
  dist::ProcessGroup& g = dist::world();
  const int r = g.rank(), n = g.size();
  // reduce_scatter: chunk c of rank r holds 10 c + r + j; rank r receives the sum over ranks of chunk r.
  std::vector<float> in;
  for (int c = 0; c < n; ++c)
    for (int j = 0; j < 3; ++j) in.push_back(float(10 * c + r + j));
  Tensor input = tensor(in, {int64_t(n) * 3}), out = zeros({3});
  g.reduce_scatter(out, input).wait();
  for (int j = 0; j < 3; ++j) CHECK(out.to_vector<float>()[size_t(j)] == float(n * (10 * r + j) + n * (n - 1) / 2));
  // all_gather: rank r contributes {r, r + 0.5}.
  Tensor mine = tensor(std::vector<float>{float(r), float(r) + 0.5f}, {2}), all = zeros({int64_t(n) * 2});
  g.all_gather(all, mine).wait();
  Tensor in_place = zeros({int64_t(n) * 2});
  in_place.narrow(0, int64_t(r) * 2, 2).copy_(mine);
  g.all_gather(in_place, in_place.narrow(0, int64_t(r) * 2, 2)).wait();
  for (int k = 0; k < n; ++k) {
    CHECK(all.to_vector<float>()[size_t(2 * k)] == float(k));
    CHECK(all.to_vector<float>()[size_t(2 * k + 1)] == float(k) + 0.5f);
    CHECK(in_place.to_vector<float>()[size_t(2 * k + 1)] == float(k) + 0.5f);
  }
  // broadcast from the last rank.
  Tensor b = full({4}, double(r), TensorOptions(kInt64));
  g.broadcast(b, n - 1).wait();
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>(4, n - 1));
  g.barrier();
  // Several collectives in flight at once complete in any waiting order.
  Tensor a1 = ones({1000}), a2 = full({7}, 2.0);
  dist::Work w1 = g.all_reduce(a1), w2 = g.all_reduce(a2);
  w2.wait();
  w1.wait();
  CHECK(w1.completed());
  CHECK(a1.to_vector<float>()[999] == float(n));
  CHECK(a2.to_vector<float>()[6] == float(2 * n));
}

TEST_CASE("process group [mpi]: host values, outside the ledger") {
  dist::ProcessGroup& g = dist::world();
  const int r = g.rank(), n = g.size();
  const int64_t before = cpu_allocated();
  CHECK(g.all_reduce(double(r) + 0.25) == doctest::Approx(n * (n - 1) / 2.0 + 0.25 * n));
  CHECK(g.all_reduce(double(r), dist::ReduceOp::Max) == double(n - 1));
  CHECK(g.all_reduce(double(r), dist::ReduceOp::Min) == 0.0);
  const std::vector<int64_t> all = g.all_gather(std::vector<int64_t>{r, 100 + r});
  REQUIRE(all.size() == size_t(2 * n));
  for (int k = 0; k < n; ++k) CHECK((all[size_t(2 * k)] == k && all[size_t(2 * k + 1)] == 100 + k));
  CHECK(g.broadcast(r == 1 ? std::string("from rank 1\n with a newline") : std::string(), 1) ==
        "from rank 1\n with a newline");
  CHECK(cpu_allocated() == before);
}

TEST_CASE("process group [mpi]: bad arguments raise typed errors on every rank and leak nothing") {
  dist::ProcessGroup& g = dist::world();
  const int n = g.size();
  Tensor a = zeros({3 * int64_t(n)});
  const int64_t before = cpu_allocated();
  CHECK_THROWS_AS(g.reduce_scatter(zeros({5}), zeros({6 * n + 1})), ShapeError);
  CHECK_THROWS_AS(g.all_gather(zeros({5}), zeros({3})), ShapeError);
  CHECK_THROWS_AS(g.all_reduce(zeros({2}, TensorOptions(kBool))), DTypeError);
  CHECK_THROWS_AS(g.all_reduce(zeros({4, 4}).t()), ValueError);  // not contiguous
  CHECK_THROWS_AS(g.all_gather(zeros({6}, TensorOptions(kFloat64)), zeros({3})), DTypeError);
  CHECK_THROWS_AS(g.broadcast(a, n), ValueError);
  CHECK_THROWS_AS(g.reduce_scatter(a.narrow(0, 0, 3), a), ValueError);  // the output inside the input
  CHECK(cpu_allocated() == before);
  // The group is still usable.
  Tensor one = ones({1});
  g.all_reduce(one).wait();
  CHECK(one.item<float>() == float(n));
}

TEST_CASE("process group [mpi]: a collective that does not complete in time raises an error that says why") {
  dist::ProcessGroup& g = dist::world();
  Tensor t = ones({8});
  if (g.rank() == g.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // late to it
  dist::Work w = g.all_reduce(t);
  if (g.rank() == 0) {
    dist::set_collective_timeout(0.2);
    try {
      w.wait();
      FAIL("expected a timeout");
    } catch (const dist::CommunicationError& e) {
      const std::string m = e.what();
      CHECK(m.find("MPI all_reduce of 8 float32 elements (rank 0 of ") == 0);
      CHECK(m.find("did not complete within 0.2 s") != std::string::npos);
      CHECK(m.find("MG_COLLECTIVE_TIMEOUT") != std::string::npos);
    }
  }
  dist::set_collective_timeout(0);  // the late rank arrives: the same wait completes after all
  w.wait();
  CHECK(t.to_vector<float>()[0] == float(g.size()));
  CHECK_THROWS_AS(dist::set_collective_timeout(-1), ValueError);
  dist::set_collective_timeout(600);
}

TEST_CASE("process group: meta tensors move nothing; the simulated group is the identity for one process") {
  auto one = dist::simulated_group();
  CHECK(one->size() == 1);
  CHECK(one->backend() == "local");
  Tensor t = tensor(std::vector<float>{1, 2, 3}, {3});
  one->all_reduce(t).wait();
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  Tensor out = zeros({3});
  one->all_gather(out, t).wait();
  CHECK(out.to_vector<float>() == std::vector<float>{1, 2, 3});
  one->reduce_scatter(out, t * 2.0).wait();
  CHECK(out.to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(one->all_reduce(2.5) == 2.5);

  auto rank3 = dist::simulated_group(3, 8);  // what the planner runs: rank 3 of 8, on meta
  CHECK(rank3->rank() == 3);
  CHECK(rank3->backend() == "simulated");
  Tensor m = empty({8 * 5}, TensorOptions(kMeta)), chunk = empty({5}, TensorOptions(kMeta));
  rank3->reduce_scatter(chunk, m).wait();
  rank3->all_gather(m, chunk).wait();
  CHECK(rank3->all_reduce(1.5) == 12.0);  // as if all 8 ranks held 1.5
  CHECK(rank3->all_reduce(1.5, dist::ReduceOp::Max) == 1.5);
  CHECK(rank3->all_gather(std::vector<int64_t>{7}) == std::vector<int64_t>(8, 7));
  CHECK_THROWS_AS(rank3->all_reduce(t), DeviceError);  // real bytes cannot be simulated
  CHECK_THROWS_AS(rank3->reduce_scatter(chunk, empty({41}, TensorOptions(kMeta))), ShapeError);
  CHECK_THROWS_AS(dist::simulated_group(2, 2), ValueError);
}

TEST_CASE("process group: launched alone, world() is this process; NCCL says why it is missing") {
  CHECK(dist::launched_world_size() == 1);
  CHECK(dist::world().size() == 1);
  CHECK(dist::world().rank() == 0);
  if (!dist::nccl_built()) CHECK_THROWS_AS(dist::new_nccl_group(dist::world(), 0), DeviceError);
}
