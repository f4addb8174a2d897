// How much memory the request bodies being read at once may hold, across every connection
// (api.max_body_memory). A request reserves its body's declared length (or, for a chunked body,
// grows its hold as the bytes arrive) before the bytes are read; one that does not fit is
// answered 503 with Retry-After instead of making the daemon grow. Used on the event loop's
// thread only; unit-tested in body_budget_test.cc.
#pragma once

#include <cstddef>
#include <utility>

namespace corral::api {

class BodyBudget {
 public:
  explicit BodyBudget(size_t limit) : limit_(limit) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  // A share of the budget, returned when the hold is destroyed or reset. An empty hold holds 0.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
    Hold& operator=(Hold&& other) noexcept {
      if (this != &other) {
        Reset();
        budget_ = std::exchange(other.budget_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    ~Hold() { Reset(); }

    // Grows the hold to `bytes` in all (never shrinks it); false, holding what it held, when the
    // budget has not that much left.
    bool GrowTo(size_t bytes) {
      if (budget_ == nullptr || bytes <= bytes_) return budget_ != nullptr;
      if (!budget_->Take(bytes - bytes_)) return false;
      bytes_ = bytes;
      return true;
    }
    void Reset() {
      if (budget_ != nullptr) budget_->in_use_ -= bytes_;
      budget_ = nullptr;
      bytes_ = 0;
    }
    size_t bytes() const { return bytes_; }
    explicit operator bool() const { return budget_ != nullptr; }

   private:
    friend class BodyBudget;
    explicit Hold(BodyBudget* budget) : budget_(budget) {}
    BodyBudget* budget_ = nullptr;
    size_t bytes_ = 0;
  };

  // A hold of `bytes`; an empty hold when they do not fit.
  Hold Reserve(size_t bytes) {
    Hold hold(this);
    if (!hold.GrowTo(bytes)) hold.budget_ = nullptr;
    return hold;
  }

  size_t in_use() const { return in_use_; }
  size_t limit() const { return limit_; }

 private:
  bool Take(size_t bytes) {
    if (bytes > limit_ - in_use_) return false;
    in_use_ += bytes;
    return true;
  }

  const size_t limit_;
  size_t in_use_ = 0;
};

}  // namespace corral::api
