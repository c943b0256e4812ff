#include "copies.hpp"

namespace holdfast::sim::detail {

Copies::Copies(const Scenario& sc, EventQueue& events, Random service_rng, Random straggler_rng)
    : sc_(sc),
      events_(events),
      service_times_(sc, service_rng),
      straggler_rng_(straggler_rng),
      copies_(static_cast<std::size_t>(sc.database.copies)) {}

std::uint32_t Copies::new_leg() {
  if (!free_legs_.empty()) {
    const std::uint32_t l = free_legs_.back();
    free_legs_.pop_back();
    return l;
  }
  legs_.emplace_back();
  return static_cast<std::uint32_t>(legs_.size() - 1);
}

void Copies::free_leg(std::uint32_t leg) noexcept {
  Leg& l = legs_[leg];
  l.live = false;
  l.running = false;
  ++l.generation;
  free_legs_.push_back(leg);
}

Copies::Sent Copies::send(int c, std::uint32_t slot, std::uint32_t tag, std::int64_t now_ns,
                          LegRef& ref) {
  ref = LegRef{};
  Copy& copy = copies_[static_cast<std::size_t>(c)];
  const auto limit = static_cast<std::size_t>(sc_.database.queue_limit);
  if (frozen_) {
    // A hang: the attempt joins the queue, to be served after the thaw, or, with the queue
    // full, is never taken in at all; either way no answer comes.
    if (copy.jobs.size() >= limit) return Sent::kTaken;
  } else if (copy.busy >= sc_.database.workers && copy.jobs.size() >= limit) {
    return Sent::kQueueFull;
  }
  const std::uint32_t l = new_leg();
  Leg& leg = legs_[l];
  leg.slot = slot;
  leg.tag = tag;
  leg.copy = c;
  leg.sent_ns = now_ns;
  leg.live = true;
  leg.running = false;
  leg.straggler = false;
  ref = LegRef{l, leg.generation};
  if (!frozen_ && copy.busy < sc_.database.workers) {
    start(l, now_ns);
  } else {
    copy.jobs.push(Job{l, leg.generation});
  }
  return Sent::kTaken;
}

void Copies::start(std::uint32_t l, std::int64_t now_ns) {
  Leg& leg = legs_[l];
  ++copies_[static_cast<std::size_t>(leg.copy)].busy;
  leg.running = true;
  bool slowed = active(TriggerKind::kCapacityDrop, now_ns) ||
                (leg.copy == slow_copy() && active(TriggerKind::kSlowCopy, now_ns));
  if (active(TriggerKind::kStragglers, now_ns) &&
      straggler_rng_.uniform() < sc_.trigger.straggler_share) {
    leg.straggler = true;
    slowed = true;
  }
  events_.push(now_ns + service_times_.draw(slowed), EventType::kServiceDone, l, leg.generation);
}

void Copies::start_queued(int c, std::int64_t now_ns) {
  if (frozen_) return;
  Copy& copy = copies_[static_cast<std::size_t>(c)];
  while (copy.busy < sc_.database.workers && !copy.jobs.empty()) {
    const Job j = copy.jobs.pop();
    Leg& leg = legs_[j.slot];
    if (!leg.live || leg.generation != j.tag) continue;  // cancelled while queued
    if (sc_.database.drop_abandoned && abandoned_ != nullptr &&
        abandoned_(abandoned_ctx_, leg.slot, leg.tag)) {
      free_leg(j.slot);
      continue;
    }
    start(j.slot, now_ns);
  }
}

void Copies::start_queued(std::int64_t now_ns) {
  for (int c = 0; c < count(); ++c)
    start_queued(c, now_ns);
}

void Copies::done(std::uint32_t l, std::int64_t now_ns) {
  const int c = legs_[l].copy;
  --copies_[static_cast<std::size_t>(c)].busy;
  free_leg(l);
  start_queued(c, now_ns);
}

void Copies::cancel(LegRef ref, std::int64_t now_ns) {
  if (ref.leg == kNoLeg) return;
  Leg& leg = legs_[ref.leg];
  if (!leg.live || leg.generation != ref.generation) return;
  if (!leg.running) {
    free_leg(ref.leg);  // its job is skipped when it comes up
    return;
  }
  done(ref.leg, now_ns);  // its kServiceDone event is stale now
}

std::uint32_t Copies::queued_total() const noexcept {
  std::size_t n = 0;
  for (const Copy& c : copies_)
    n += c.jobs.size();
  return static_cast<std::uint32_t>(n);
}

std::uint32_t Copies::busy_total() const noexcept {
  int n = 0;
  for (const Copy& c : copies_)
    n += c.busy;
  return static_cast<std::uint32_t>(n);
}

double Copies::mean_service_ns(int c, std::int64_t now_ns) const noexcept {
  double mean = static_cast<double>(sc_.database.mean_service.count());
  if (active(TriggerKind::kCapacityDrop, now_ns) ||
      (c == slow_copy() && active(TriggerKind::kSlowCopy, now_ns))) {
    mean *= sc_.trigger.factor;
  }
  return mean;
}

}  // namespace holdfast::sim::detail
