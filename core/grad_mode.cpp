#include <memgrad/core/grad_mode.h>

namespace mg {

namespace {
thread_local bool t_grad_enabled = true;
}
bool GradMode::is_enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool on) { t_grad_enabled = on; }

}  // namespace mg
