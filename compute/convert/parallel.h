// compute/convert/parallel.h: runs independent tasks on a few threads.
// It never decides how work is split: callers cut work into a fixed number
// of tasks and reduce per-task results in task order, so output never
// depends on the thread count.
#pragma once

#include <cstddef>
#include <functional>

namespace sluice::convert {

// Calls fn(task) once for every task in [0, tasks), on up to `threads`
// threads. The first exception thrown by a task stops the handing out of
// further tasks and is rethrown here after every thread has finished.
void parallel_for(size_t tasks, int threads, const std::function<void(size_t)>& fn);

// Cores this process may run on (its CPU affinity mask), at least 1.
int available_cores();

}  // namespace sluice::convert
