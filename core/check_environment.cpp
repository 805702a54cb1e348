// check_environment (core/env.h): every MG_* variable, checked by the part of core that reads it. It
// asks the allocator, the memory limits, the CPU ISA and the kernel variants, so it sits above them
// all, while core/env.h's message helpers sit below every one of them.
#include <cstdlib>
#include <optional>
#include <string>

#include <memgrad/core/allocator.h>
#include <memgrad/core/cpu_isa_impl.h>
#include <memgrad/core/env.h>
#include <memgrad/core/error.h>
#include <memgrad/core/memory.h>
#include <memgrad/core/variants_impl.h>

namespace mg {

void check_environment() {
  auto get = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v && *v ? std::optional<std::string>(v) : std::nullopt;
  };
  allocator_config();  // MG_ALLOC_CONF, read once: a ValueError naming it
  if (const auto v = get("MG_MEMORY_LIMIT"))
    for (DeviceType d : {DeviceType::CPU, DeviceType::CUDA, DeviceType::Meta}) memory::limit_from_env(*v, d);
  if (const auto v = get("MG_CPU_ISA"); v && !detail::parse_cpu_isa(*v))
    throw ValueError(env::message("MG_CPU_ISA", *v, detail::kCpuIsaExpected));
  if (const auto v = get("MG_KERNEL_VARIANTS"))
    if (const std::string error = detail::kernel_variants_env_error(*v); !error.empty())
      throw ValueError(env::message("MG_KERNEL_VARIANTS", *v, error));
  if (const auto v = get("MG_COLLECTIVE_TIMEOUT"); v && !env::parse_seconds(*v))
    throw ValueError(env::message("MG_COLLECTIVE_TIMEOUT", *v, env::kSecondsExpected));
}

}  // namespace mg
