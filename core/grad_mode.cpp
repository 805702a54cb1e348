#include <memgrad/core/grad_mode.h>

namespace mg {

namespace {
// Read on every op: initial-exec makes it one instruction (see t_scopes in core/memory/allocator.cpp).
__attribute__((tls_model("initial-exec"))) thread_local bool t_grad_enabled = true;
}  // namespace
bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool on) { t_grad_enabled = on; }

}  // namespace mg
