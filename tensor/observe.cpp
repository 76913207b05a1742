// The thread's op observer (observe.h).
#include "tensor/observe.h"

namespace dl {

thread_local Observer* t_observer = nullptr;
thread_local int t_observe_depth = 0;
std::atomic<int> g_observers{0};

}  // namespace dl
