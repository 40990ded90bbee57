// compute/convert/parallel.h: runs independent conversion tasks on the
// kernels' thread pool. It never decides how work is split: callers cut work
// into a fixed number of tasks and reduce per-task results in task order, so
// output never depends on the thread count.
#pragma once

#include <algorithm>
#include <cstddef>

#include "compute/kernels/thread_pool.h"

namespace sluice::convert {

// Calls fn(task) once for every task in [0, tasks) on up to `threads`
// threads; the first exception a task throws is rethrown here once every
// thread has finished. Tasks are coarse (an expert, a chunk of rows), so the
// pool's start-up per call is noise next to the work.
template <typename Fn>
void parallel_for(size_t tasks, int threads, Fn&& fn) {
  kernels::ThreadPool pool(std::clamp<size_t>(static_cast<size_t>(std::max(threads, 1)), 1, std::max<size_t>(tasks, 1)));
  pool.parallel_for(tasks, 1, [&](size_t begin, size_t end) {
    for (size_t task = begin; task < end; ++task) fn(task);
  });
}

}  // namespace sluice::convert
