// Owner labels, interned once where they are named: a block holds the label's id, and the ledger
// counts bytes per id, so allocating and freeing never copy or look up a string.
#include <array>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <memgrad/core/memory/allocator_impl.h>

namespace mg::memory {

namespace {
struct OwnerTable {
  std::mutex mu;
  std::unordered_map<std::string, OwnerId> ids{{std::string(), 0}};
  std::vector<std::unique_ptr<const std::string>> labels;  // by id; a label's address never changes
  OwnerTable() { labels.push_back(std::make_unique<const std::string>()); }
};
OwnerTable& owner_table() {
  static OwnerTable* t = new OwnerTable;  // never destroyed: blocks may be freed during static destruction
  return *t;
}
}  // namespace

OwnerId intern_owner(const std::string& label) {
  auto& t = owner_table();
  std::lock_guard<std::mutex> g(t.mu);
  auto [it, added] = t.ids.emplace(label, OwnerId(t.labels.size()));
  if (added) t.labels.push_back(std::make_unique<const std::string>(label));
  return it->second;
}

const std::string& owner_label(OwnerId id) {
  auto& t = owner_table();
  std::lock_guard<std::mutex> g(t.mu);
  return *t.labels.at(id);
}

namespace impl {

OwnerId op_owner(Op op) {
  static std::array<std::atomic<OwnerId>, size_t(Op::none) + 1> ids{};
  auto& slot = ids[size_t(op)];
  OwnerId id = slot.load(std::memory_order_relaxed);
  if (id == 0) slot.store(id = intern_owner(op_name(op)), std::memory_order_relaxed);
  return id;
}

std::map<std::string, int64_t> by_label(const std::vector<int64_t>& bytes) {
  std::map<std::string, int64_t> r;
  for (size_t id = 0; id < bytes.size(); ++id)
    if (bytes[id]) r.emplace(owner_label(OwnerId(id)), bytes[id]);
  return r;
}

}  // namespace impl
}  // namespace mg::memory
