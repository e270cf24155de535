// ByteBudget: the server-wide budget of request and reply bytes in flight
// (ropeserve --max_inflight_bytes; docs/operations.md "Memory").
//
// A call is charged the bytes of its request, which are already resident when
// the handler sees it, plus the bytes its reply will need, and holds them
// until gRPC has sent the reply. The invariant: the bytes charged never exceed
// the budget. A call whose request fits beside the bytes already charged, but
// whose reply does not, waits (its request bytes charged meanwhile) until
// other calls release enough or its deadline passes; a call whose request
// does not even fit, or whose request plus reply exceeds the whole budget, is
// refused at once. Waiters are granted first-fit in arrival order: a small
// call is not held behind a large one (a large one may thus wait until its
// deadline while small ones pass; it is then refused, never lost).
//
// One client's share (ropeserve --max_inflight_bytes_per_client): the bytes
// charged to the calls of one client (caller_identity.h) stay within
// `per_client_bytes`, so that one client's large calls (or replies it does
// not read) cannot take the whole budget while the others wait. A call that
// would take its client past the share waits like one that does not fit the
// budget (its request, already resident, charged to the budget meanwhile;
// other clients' calls are granted past it) until its client's other calls
// return enough, or its deadline. A client with nothing else in
// flight may take the whole budget with one call: the share bounds how much
// one client holds beside its other calls, never the size of a call (that
// is the budget's and --max_message_bytes'). Calls with no client identity
// are held to the budget only.
//
// No gRPC: tested alone, and under ThreadSanitizer (scripts/tsan.sh).
// Hand-written because neither gRPC (its ResourceQuota counts transport
// buffers, not parsed messages) nor Abseil offers an asynchronous counting
// semaphore with deadlines.
//
// Thread-safe.
#ifndef ROPE_SERVICE_BYTE_BUDGET_H_
#define ROPE_SERVICE_BYTE_BUDGET_H_

#include <cstdint>
#include <list>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace rope {

class ByteBudget {
 public:
  // Called exactly once per Reserve: OK when the bytes are granted (the
  // caller then holds held + more bytes and must Release them), otherwise
  // RESOURCE_EXHAUSTED (the caller holds nothing).
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // `budget_bytes` <= 0 means no limit. A waiter is refused after
  // `max_wait` even when its deadline is later (or infinite). Refusals name
  // the budget as `budget_text` ("max_inflight_bytes <budget_bytes>" when
  // empty). `per_client_bytes` <= 0 (or no budget): no per-client share;
  // refusals name it "max_inflight_bytes_per_client <per_client_bytes>".
  ByteBudget(int64_t budget_bytes, absl::Duration max_wait, std::string budget_text = "",
             int64_t per_client_bytes = 0);
  // Refuses the calls still waiting (RESOURCE_EXHAUSTED) and stops the timer
  // thread. Calls holding bytes need not have released them.
  ~ByteBudget();
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Charges `held_bytes` now (bytes already resident) and asks for
  // `more_bytes` besides. `done` runs on the calling thread before Reserve
  // returns when the answer is immediate, otherwise on the thread of the
  // Release() that makes room or on the budget's timer thread at
  // min(deadline, now + max_wait); never under the budget's lock. `what`
  // names the call in refusal messages ("Rotate").
  // The bytes are charged to `client`'s share too (empty: no client, held
  // to the budget only); so are those of every call below.
  void Reserve(absl::string_view what, absl::string_view client, int64_t held_bytes,
               int64_t more_bytes, absl::Time deadline, Done done);
  void Reserve(absl::string_view what, int64_t held_bytes, int64_t more_bytes,
               absl::Time deadline, Done done) {
    Reserve(what, "", held_bytes, more_bytes, deadline, std::move(done));
  }

  // Reserve for a request that arrived as wire bytes and is not parsed yet:
  // `wire_bytes` are resident, `parsed_bytes` (what its parse allocates) are
  // asked for besides. Refusals say "parsed" where Reserve's say "reply".
  void ReserveParse(absl::string_view what, absl::string_view client, int64_t wire_bytes,
                    int64_t parsed_bytes, absl::Time deadline, Done done);

  // Charges `bytes` if they fit beside the bytes in use now, and within
  // `client`'s share (true; the caller then holds them), or nothing
  // (false): never waits, never counts as a refusal.
  bool TryReserve(absl::string_view client, int64_t bytes);

  // A second Reserve of a call that holds `charged_bytes` granted earlier
  // (a raw request's wire and parsed bytes, before its reply is known):
  // asks for `more_bytes` besides, as Reserve does with nothing held now,
  // except that a call whose whole charge (charged_bytes + more_bytes)
  // exceeds the budget is refused at once rather than left to wait in vain.
  // Refusals name the whole charge. In the client's share the
  // `charged_bytes` count as the call's own (not as other calls').
  void TopUp(absl::string_view what, absl::string_view client, int64_t charged_bytes,
             int64_t more_bytes, absl::Time deadline, Done done);

  // Returns bytes granted by Reserve to `client` (the same client); may
  // grant waiters (running their `done` on this thread).
  void Release(absl::string_view client, int64_t bytes);
  void Release(int64_t bytes) { Release("", bytes); }

  // Answers every call waiting now with `status` (e.g. UNAVAILABLE when the
  // server drains), returning their request bytes. Not counted as refusals.
  void RefuseWaiting(const absl::Status& status);

  int64_t budget_bytes() const { return budget_bytes_; }
  // 0: no per-client share.
  int64_t per_client_bytes() const { return per_client_bytes_; }
  // Bytes charged to `client`'s calls now.
  int64_t client_bytes(absl::string_view client) const;
  absl::Duration max_wait() const { return max_wait_; }
  int64_t in_use_bytes() const;
  int64_t waiters() const;
  // Calls refused so far (at once or at their deadline).
  int64_t refusals() const;

 private:
  struct Waiter {
    std::string what;
    std::string client;
    std::string more_name;  // what `more_bytes` are for, in messages
    int64_t prior_bytes;    // charged earlier (the call's own in its share)
    int64_t held_bytes;
    int64_t more_bytes;
    absl::Time since;
    absl::Time give_up;
    Done done;
  };

  // Reserve and TopUp: `prior_bytes` are already charged to the caller.
  void ReserveAfter(absl::string_view what, absl::string_view client, int64_t prior_bytes,
                    int64_t held_bytes, int64_t more_bytes, absl::string_view more_name,
                    absl::Time deadline, Done done);
  // Moves the waiters that now fit, first-fit in arrival order, to `granted`
  // (charging them).
  void GrantLocked(std::list<Waiter>& granted) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `client`'s share has room for `bytes` more beside what it holds,
  // `own_bytes` of which belong to the asking call itself (its request,
  // while it waits): always when the client holds nothing else.
  bool ShareFitsLocked(absl::string_view client, int64_t own_bytes, int64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ClientBytesLocked(absl::string_view client) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChargeClientLocked(absl::string_view client, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a call of `client` does not fit its share (`own_bytes` of the
  // client's bytes are the call's own).
  std::string ShareRefusalLocked(absl::string_view client, int64_t own_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TimerMain();

  const int64_t budget_bytes_;
  const absl::Duration max_wait_;
  const std::string budget_text_;
  const int64_t per_client_bytes_;
  mutable absl::Mutex mu_;
  absl::CondVar timer_wake_;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refusals_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  // Bytes charged per client (only with a per-client share; only clients
  // holding bytes are kept).
  absl::flat_hash_map<std::string, int64_t> client_in_use_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_BYTE_BUDGET_H_
