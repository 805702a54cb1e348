// The backward engine: runs nodes in dependency order, newest first among the ready ones, and
// frees each node's saved tensors and gradient buffers as soon as they have been used.
#include <queue>
#include <unordered_map>

#include <memgrad/autograd/node.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>

namespace mg::autograd {

namespace {

struct NewestFirst {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

void accumulate(Tensor& slot, Tensor&& g) {
  if (!g.defined()) return;
  if (!slot.defined())
    slot = std::move(g);
  else
    slot = add(slot, g);
}

}  // namespace

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  NoGradGuard no_grad;  // backward formulas do not record (no higher-order gradients)
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, TensorList> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;

  // Count, for every reachable node, how many edges lead into it.
  std::vector<Node*> stack;
  std::vector<Edge> root_edges;
  for (auto& r : roots) {
    Edge e = gradient_edge(r);
    MG_CHECK(e.valid(), AutogradError,
             "backward: expected a tensor that requires grad, got one that does not"
             " (did you forget requires_grad_(), or run under NoGradGuard?)");
    root_edges.push_back(e);
    keep_alive.push_back(e.node);
    if (!deps.count(e.node.get())) {
      deps[e.node.get()] = 0;
      stack.push_back(e.node.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      if (!deps.count(e.node.get())) stack.push_back(e.node.get());
      ++deps[e.node.get()];
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    auto* n = root_edges[i].node.get();
    auto& buf = buffers[n];
    buf.resize(std::max<size_t>(n->outputs().size(), 1));
    accumulate(buf[root_edges[i].input_nr], Tensor(grads[i]));
  }
  for (auto& e : root_edges)
    if (deps[e.node.get()] == 0) {
      ready.push(e.node.get());
      deps[e.node.get()] = -1;  // queued
    }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = std::move(buffers[n]);
    buffers.erase(n);
    bool any = false;
    for (auto& g : in) any = any || g.defined();
    if (!any) {  // no gradient reached this node: nothing flows further along its edges
      if (!retain_graph) n->release_saved();
      for (auto& e : n->next_edges())
        if (e.valid() && --deps[e.node.get()] == 0) ready.push(e.node.get());
      continue;
    }
    for (auto& [nr, hooks] : n->pre_hooks())
      for (auto& h : hooks)
        if (nr < in.size() && in[nr].defined())
          if (Tensor r = h(in[nr]); r.defined()) in[nr] = r;
    for (size_t i = 0; i < n->outputs().size() && i < in.size(); ++i)
      if (!in[i].defined()) {
        auto& m = n->outputs()[i];
        in[i] = zeros(m.shape, TensorOptions().dtype(m.dtype).device(m.device));
      }
    TensorList out = n->apply(std::move(in));
    if (!retain_graph) n->release_saved();
    auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      if (!edges[i].valid()) continue;
      Node* next = edges[i].node.get();
      if (i < out.size() && out[i].defined()) {
        auto& buf = buffers[next];
        buf.resize(std::max<size_t>(next->outputs().size(), 1));
        accumulate(buf[edges[i].input_nr], std::move(out[i]));
      }
      if (--deps[next] == 0) ready.push(next);
    }
  }
}

}  // namespace mg::autograd
