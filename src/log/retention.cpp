#include <string>

#include "holdfast/log/database_sink.hpp"

namespace holdfast {

WallTime retention_cutoff(WallTime now, std::chrono::days keep) {
  return now - keep;
}

Result<std::int64_t> prune_logs(LogStore& store, WallTime cutoff, const PruneOptions& options) {
  if (options.batch_size < 1) {
    return Status(Code::kInvalidArgument,
                  "prune_logs: PruneOptions::batch_size must be at least 1, got " +
                      std::to_string(options.batch_size));
  }
  if (options.pause_between_batches < Duration::zero()) {
    return Status(Code::kInvalidArgument,
                  "prune_logs: PruneOptions::pause_between_batches must not be negative");
  }
  Clock& clock = options.clock ? *options.clock : Clock::system();
  std::int64_t deleted = 0;
  for (;;) {
    Result<int> batch = store.delete_older_than(cutoff, options.batch_size);
    if (!batch.ok()) {
      Status s = batch.status();
      s.annotate("prune_logs: deleted " + std::to_string(deleted) + " rows, then");
      return s;
    }
    if (*batch < 0 || *batch > options.batch_size) {
      return Status(Code::kInternal, "prune_logs: the store reported " + std::to_string(*batch) +
                                         " rows deleted for a batch of " +
                                         std::to_string(options.batch_size));
    }
    deleted += *batch;
    if (*batch < options.batch_size) return deleted;
    // Let writers that wait for the lock in before the next batch.
    if (options.pause_between_batches > Duration::zero()) {
      clock.sleep_for(options.pause_between_batches);
    }
  }
}

}  // namespace holdfast
