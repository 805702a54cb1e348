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

// The budget runtime (core/budget/budget.h), as backward meets it: the one place the engine reaches
// it. Each hook does nothing unless some device is under a budget now.
struct BudgetHooks {
  // Whether a device is under a budget now: accumulate() then adds out of place (see there).
  static bool active() { return budget::detail::any_active(); }
  // `g` is a gradient seeded into the pass: what kernels make from it stays a gradient.
  static void seed(const Tensor& g) {
    if (active()) budget::detail::mark_gradient(g);
  }
  // `n` is about to run: the offloaded tensors saved for it, and for the nodes it is the last to
  // send a gradient to (they run next), are fetched back first.
  static void before_apply(Node& n, const std::unordered_map<Node*, int>& deps) {
    if (!active()) return;
    std::vector<std::weak_ptr<Storage>> reads = n.saved_storages();
    for (auto& e : n.next_edges())
      if (auto it = e.valid() ? deps.find(e.node.get()) : deps.end(); it != deps.end() && it->second == 1)
        reads.insert(reads.end(), e.node->saved_storages().begin(), e.node->saved_storages().end());
    budget::detail::prefetch(reads);
  }
};

// A second gradient for one slot is added into the first in place when the engine alone holds that
// buffer and records no history: a tensor used twice (a tied embedding, a residual) then costs two
// buffers of its size at once, not three. Not under a budget: its runtime rescues a cell before an
// in-place write, and a mixed plan made on meta then offloads other cells than the cpu run does
// (tests/plan/test_mixed.cpp).
void accumulate(Tensor& slot, Tensor&& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = std::move(g);
  } else if (!GradMode::is_enabled() && !BudgetHooks::active() && slot.shape() == g.shape() &&
             slot.dtype() == g.dtype() && slot.device() == g.device() && sole_buffer(slot)) {
    slot.add_(g);
  } else {
    slot = math::add(slot, g);
  }
}

// What a pass computes: with no captures, every reachable node runs and leaves accumulate into
// .grad; with captures, the gradients arriving at those edges are returned and only the nodes
// from which a captured edge can be reached run. `stop_at_captures` does not look past the
// captured nodes (differentiate(): partial derivatives w.r.t. the op's own inputs).
struct Pass {
  std::vector<Edge> captures;
  bool stop_at_captures = false;
};

// The graph below the roots as one pass sees it, and its state while it runs (the members in the
// order the pass made them as one function's locals, so that they die in the same order).
struct Graph {
  const Pass& pass;
  // Edges still to deliver into each reachable node; -1 once queued.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, TensorList> buffers;       // gradients arriving at each node
  std::unordered_multimap<Node*, size_t> captured_at;  // node -> index into pass.captures
  std::vector<Edge> root_edges;
  std::vector<std::shared_ptr<Node>> keep_alive;
  std::unordered_map<Node*, std::vector<Node*>> parents;  // reverse edges (with captures only)
  std::unordered_set<Node*> runs;                         // with captures: the nodes that run
  TensorList captured;
  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;

  explicit Graph(const Pass& p) : pass(p), captured(p.captures.size()) {
    for (size_t k = 0; k < pass.captures.size(); ++k) captured_at.emplace(pass.captures[k].node.get(), k);
  }
  bool is_captured(Node* n) const { return captured_at.count(n) > 0; }
  // n sends nothing (more) along its edges.
  void release_children(Node* n) {
    if (pass.stop_at_captures && is_captured(n)) return;
    for (auto& e : n->next_edges())
      if (e.valid() && --deps[e.node.get()] == 0) ready.push(e.node.get());
  }
};

// Phase 1: every reachable node, with how many edges lead into it.
void count_dependencies(Graph& g, const TensorList& roots) {
  std::vector<Node*> stack;
  for (auto& r : roots) {
    Edge e = gradient_edge(r);
    MG_CHECK(e.valid(), AutogradError,
             "backward: expected a tensor that requires grad, got one that does not"
             " (did you forget requires_grad_(), or run under NoGradGuard?)");
    g.root_edges.push_back(e);
    g.keep_alive.push_back(e.node);
    if (!g.deps.count(e.node.get())) {
      g.deps[e.node.get()] = 0;
      stack.push_back(e.node.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (g.pass.stop_at_captures && g.is_captured(n)) continue;
    for (auto& e : n->next_edges()) {
      if (!e.valid()) continue;
      if (!g.deps.count(e.node.get())) stack.push_back(e.node.get());
      ++g.deps[e.node.get()];
      if (!g.pass.captures.empty()) g.parents[e.node.get()].push_back(n);
    }
  }
}

// Phase 2 (with captures): a node runs only when a captured node is reachable from it.
void find_nodes_that_run(Graph& g) {
  if (g.pass.captures.empty()) return;
  std::vector<Node*> todo;
  for (auto& c : g.pass.captures) todo.push_back(c.node.get());
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    for (Node* p : g.parents[n])
      if (g.runs.insert(p).second) todo.push_back(p);
  }
}

// Phase 3: the seeds into the roots' buffers, and the roots nothing else feeds queued.
void seed_roots(Graph& g, const TensorList& grads) {
  for (size_t i = 0; i < g.root_edges.size(); ++i) {
    auto* n = g.root_edges[i].node.get();
    auto& buf = g.buffers[n];
    buf.resize(std::max<size_t>(n->outputs().size(), 1));
    BudgetHooks::seed(grads[i]);
    accumulate(buf[g.root_edges[i].input_nr], Tensor(grads[i]));
  }
  for (auto& e : g.root_edges)
    if (g.deps[e.node.get()] == 0) {
      g.ready.push(e.node.get());
      g.deps[e.node.get()] = -1;  // queued
    }
}

// The gradients arriving at `n`, through its pre-hooks, and those of its edges the pass captures.
TensorList take_inputs(Graph& g, Node* n) {
  TensorList in = std::move(g.buffers[n]);
  g.buffers.erase(n);
  for (auto& [nr, hooks] : n->pre_hooks())
    for (auto& h : hooks)
      if (nr < in.size() && in[nr].defined())
        if (Tensor r = h(in[nr]); r.defined()) in[nr] = r;
  for (auto [it, end] = g.captured_at.equal_range(n); it != end; ++it) {
    uint32_t nr = g.pass.captures[it->second].input_nr;
    if (nr < in.size()) g.captured[it->second] = in[nr];
  }
  return in;
}

// Runs `n` on `in` (zeros where no gradient arrived at an output) and sends its results along its
// edges, queueing each node that has then received everything.
void apply_node(Graph& g, Node* n, TensorList in, bool retain_graph) {
  for (size_t i = 0; i < n->outputs().size() && i < in.size(); ++i)
    if (!in[i].defined()) {
      auto& m = n->outputs()[i];
      in[i] = math::zeros(m.shape, TensorOptions().dtype(m.dtype).device(m.device));
    }
  BudgetHooks::before_apply(*n, g.deps);
  TensorList out = n->apply(std::move(in));
  if (!retain_graph) n->release_saved();
  auto& edges = n->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].valid()) continue;
    Node* next = edges[i].node.get();
    if (i < out.size() && out[i].defined()) {
      auto& buf = g.buffers[next];
      buf.resize(std::max<size_t>(next->outputs().size(), 1));
      accumulate(buf[edges[i].input_nr], std::move(out[i]));
    }
    if (--g.deps[next] == 0) g.ready.push(next);
  }
}

// Phase 4: the ready nodes, newest first, until none is left.
void run_ready_nodes(Graph& g, bool retain_graph) {
  while (!g.ready.empty()) {
    Node* n = g.ready.top();
    g.ready.pop();
    TensorList in = take_inputs(g, n);
    bool any = false;
    for (auto& x : in) any = any || x.defined();
    const bool run = g.pass.captures.empty() || g.runs.count(n);
    if (!any || !run) {  // no gradient reached this node, or nothing needs what it would send
      if (!any && run && !retain_graph) n->release_saved();
      g.release_children(n);
      continue;
    }
    apply_node(g, n, std::move(in), retain_graph);
  }
}

TensorList execute(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph,
                   const Pass& pass) {
  GradModeGuard mode(create_graph);  // the formulas record history exactly when creating a graph
  Graph g(pass);
  count_dependencies(g, roots);
  find_nodes_that_run(g);
  seed_roots(g, grads);
  run_ready_nodes(g, retain_graph);
  return std::move(g.captured);
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
