// The backward engine: runs nodes in dependency order, newest first among the ready ones, and
// frees each node's saved tensors and gradient buffers as soon as they have been used. backward()
// accumulates into the leaves' .grad; grad() captures the gradients of chosen tensors instead and
// runs only the nodes that lead to them.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <memgrad/autograd/grad_math.h>
#include <memgrad/autograd/node.h>
#include <memgrad/core/budget/runtime_impl.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/core/memory.h>

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
    slot = math::add(slot, g);
}

// Under a memory budget (core/budget/budget.h): the offloaded tensors saved for `n`, and for the nodes
// it is the last to send a gradient to (they run next), are fetched back before `n` runs.
void prefetch_saved(Node& n, const std::unordered_map<Node*, int>& deps) {
  std::vector<std::weak_ptr<Storage>> reads = n.saved_storages();
  for (auto& e : n.next_edges())
    if (auto it = e.valid() ? deps.find(e.node.get()) : deps.end(); it != deps.end() && it->second == 1)
      reads.insert(reads.end(), e.node->saved_storages().begin(), e.node->saved_storages().end());
  budget::detail::prefetch(reads);
}

// What a pass computes: with no captures, every reachable node runs and leaves accumulate into
// .grad; with captures, the gradients arriving at those edges are returned and only the nodes
// from which a captured edge can be reached run. `stop_at_captures` does not look past the
// captured nodes (differentiate(): partial derivatives w.r.t. the op's own inputs).
struct Pass {
  std::vector<Edge> captures;
  bool stop_at_captures = false;
};

TensorList execute(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph,
                   const Pass& pass) {
  GradModeGuard mode(create_graph);  // the formulas record history exactly when creating a graph
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, TensorList> buffers;
  std::unordered_multimap<Node*, size_t> captured_at;  // node -> index into pass.captures
  for (size_t k = 0; k < pass.captures.size(); ++k) captured_at.emplace(pass.captures[k].node.get(), k);
  auto is_captured = [&](Node* n) { return captured_at.count(n) > 0; };

  // Count, for every reachable node, how many edges lead into it.
  std::vector<Node*> stack;
  std::vector<Edge> root_edges;
  std::vector<std::shared_ptr<Node>> keep_alive;
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
  std::unordered_map<Node*, std::vector<Node*>> parents;  // reverse edges, to find what leads to a capture
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (pass.stop_at_captures && is_captured(n)) continue;
    for (auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      if (!deps.count(e.node.get())) stack.push_back(e.node.get());
      ++deps[e.node.get()];
      if (!pass.captures.empty()) parents[e.node.get()].push_back(n);
    }
  }
  // With captures, a node runs only when a captured node is reachable from it.
  std::unordered_set<Node*> runs;
  if (!pass.captures.empty()) {
    std::vector<Node*> todo;
    for (auto& c : pass.captures) todo.push_back(c.node.get());
    while (!todo.empty()) {
      Node* n = todo.back();
      todo.pop_back();
      for (Node* p : parents[n])
        if (runs.insert(p).second) todo.push_back(p);
    }
  }
  TensorList captured(pass.captures.size());

  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    auto* n = root_edges[i].node.get();
    auto& buf = buffers[n];
    buf.resize(std::max<size_t>(n->outputs().size(), 1));
    if (budget::detail::any_active()) budget::detail::mark_gradient(grads[i]);
    accumulate(buf[root_edges[i].input_nr], Tensor(grads[i]));
  }
  for (auto& e : root_edges)
    if (deps[e.node.get()] == 0) {
      ready.push(e.node.get());
      deps[e.node.get()] = -1;  // queued
    }
  auto release_children = [&](Node* n) {  // n sends nothing (more) along its edges
    if (pass.stop_at_captures && is_captured(n)) return;
    for (auto& e : n->next_edges())
      if (e.valid() && --deps[e.node.get()] == 0) ready.push(e.node.get());
  };

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList in = std::move(buffers[n]);
    buffers.erase(n);
    for (auto& [nr, hooks] : n->pre_hooks())
      for (auto& h : hooks)
        if (nr < in.size() && in[nr].defined())
          if (Tensor r = h(in[nr]); r.defined()) in[nr] = r;
    for (auto [it, end] = captured_at.equal_range(n); it != end; ++it) {
      uint32_t nr = pass.captures[it->second].input_nr;
      if (nr < in.size()) captured[it->second] = in[nr];
    }
    bool any = false;
    for (auto& g : in) any = any || g.defined();
    const bool run = pass.captures.empty() || runs.count(n);
    if (!any || !run) {  // no gradient reached this node, or nothing needs what it would send
      if (!any && run && !retain_graph) n->release_saved();
      release_children(n);
      continue;
    }
    for (size_t i = 0; i < n->outputs().size() && i < in.size(); ++i)
      if (!in[i].defined()) {
        auto& m = n->outputs()[i];
        in[i] = math::zeros(m.shape, TensorOptions().dtype(m.dtype).device(m.device));
      }
    if (budget::detail::any_active()) prefetch_saved(*n, deps);
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
  return captured;
}

// Seeds for `outputs`: the given gradient, or 1 for a one-element output.
TensorList seeds(const TensorList& outputs, const TensorList& given) {
  MG_CHECK(given.empty() || given.size() == outputs.size(), ValueError, "grad: expected one gradient per output (",
           outputs.size(), "), got ", given.size());
  TensorList r;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor g = given.empty() ? Tensor() : given[i];
    const Tensor& y = outputs[i];
    if (!g.defined()) {
      MG_CHECK(y.numel() == 1, AutogradError, "grad: expected a one-element output when no gradient is given, got ",
               shape_str(y.shape()), " for output ", i);
      NoGradGuard ng;
      g = math::ones(y.shape(), y.options());
    }
    MG_CHECK(g.shape() == y.shape(), ShapeError, "grad: expected a gradient of shape ", shape_str(y.shape()),
             " for output ", i, ", got ", shape_str(g.shape()));
    MG_CHECK(g.device() == y.device(), DeviceError, "grad: expected a gradient on ", y.device(), " for output ", i,
             ", got one on ", g.device());
    r.push_back(g.to(y.dtype()));  // as backward() does: the seed takes the output's dtype
  }
  return r;
}

}  // namespace

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph) {
  execute(roots, grads, retain_graph, create_graph, Pass{});
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                std::optional<bool> retain_graph, bool create_graph, bool allow_unused) {
  Pass pass;
  for (size_t i = 0; i < inputs.size(); ++i) {
    MG_CHECK(inputs[i].defined() && inputs[i].requires_grad(), AutogradError, "grad: input ", i,
             " does not require grad; expected tensors that require grad");
    pass.captures.push_back(gradient_edge(inputs[i]));
  }
  // As in backward(), what the pass allocates is Temporary unless the caller set a category.
  const bool caller_set =
      current_category(Category::Input) != Category::Input || current_category(Category::Other) != Category::Other;
  std::optional<MemoryScope> temporary;
  if (!caller_set) temporary.emplace(Category::Temporary);
  TensorList r =
      execute(outputs, seeds(outputs, grad_outputs), retain_graph.value_or(create_graph), create_graph, pass);
  for (size_t i = 0; i < r.size(); ++i)
    MG_CHECK(r[i].defined() || allow_unused, AutogradError, "grad: input ", i,
             " was not used to compute the outputs; pass allow_unused = true to get an undefined gradient for it");
  return r;
}

TensorList differentiate(const std::function<TensorList(const TensorList&)>& fn, const TensorList& inputs,
                         const TensorList& grad_outputs) {
  TensorList outputs;
  {
    EnableGradGuard grad_mode;
    outputs = fn(inputs);
  }
  Pass pass;
  pass.stop_at_captures = true;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      which.push_back(i);
      pass.captures.push_back(gradient_edge(inputs[i]));
    }
  TensorList roots, seeds;
  for (size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i)
    if (grad_outputs[i].defined() && outputs[i].requires_grad())
      roots.push_back(outputs[i]), seeds.push_back(grad_outputs[i]);
  TensorList r(inputs.size());
  if (roots.empty() || which.empty()) return r;
  TensorList got = execute(roots, seeds, true, true, pass);
  for (size_t k = 0; k < which.size(); ++k) r[which[k]] = got[k];
  return r;
}

}  // namespace mg::autograd
