// The cpu backend: the oracle behind the Plan interface.
#include <sstream>

#include "core/plan_impl.h"
#include "cpu/oracle.h"

namespace pagedattn {
namespace detail {

namespace {
class CpuPlan final : public PlanImpl {
 public:
  explicit CpuPlan(const Params& p) : planned_(p) {}
  void run(const Params& p) override {
    check_same_signature(planned_, p);
    validate(p);  // cheap on the host, and run() may see new metadata on this backend
    oracle::forward(p);
  }
  Backend backend() const override { return Backend::cpu; }
  std::string describe() const override {
    std::ostringstream os;
    os << "pagedattn plan: backend=cpu (oracle), num_seqs=" << planned_.past_lens.numel()
       << " num_tokens=" << planned_.query.shape[0];
    return os.str();
  }

 private:
  Params planned_;
};
}  // namespace

std::shared_ptr<PlanImpl> make_cpu_plan(const Params& p, const Options&) { return std::make_shared<CpuPlan>(p); }

}  // namespace detail
}  // namespace pagedattn
