#include "client/load/call_driver.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/client_callback.h>
#include <grpcpp/support/slice.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/grpc_status.h"
#include "common/retry_metadata.h"

namespace rope {
namespace load {
namespace {

using Message = google::protobuf::Message;
using Traits = grpc::SerializationTraits<Message>;

void SetDeadline(grpc::ClientContext* context, absl::Duration deadline) {
  if (deadline == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
}

// Serialises request variant `variant` (its payload, then its config field
// when the workload has several configs) into `buffer`, timing it into
// outcome->marshal and counting the bytes. INTERNAL when protobuf refuses (a
// message over 2 GiB).
absl::Status Marshal(const Workload& workload, int variant, grpc::ByteBuffer* buffer,
                     CallOutcome* outcome) {
  const absl::Time t0 = absl::Now();
  bool own_buffer = false;
  grpc::Status status = Traits::Serialize(workload.payload(variant), buffer, &own_buffer);
  const absl::string_view config = workload.config_field(variant);
  if (status.ok() && !config.empty()) {
    std::vector<grpc::Slice> slices;
    status = buffer->Dump(&slices);
    slices.emplace_back(config.data(), config.size());
    if (status.ok()) *buffer = grpc::ByteBuffer(slices.data(), slices.size());
  }
  outcome->marshal += absl::Now() - t0;
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("serialising the request failed: ",
                                            status.error_message()));
  }
  outcome->bytes_sent = static_cast<int64_t>(buffer->Length());
  return absl::OkStatus();
}

// Parses `buffer` into a new reply, timing it into outcome->marshal.
// nullptr (and outcome->code INTERNAL) when the bytes do not parse.
std::unique_ptr<Message> Unmarshal(const Message& prototype, grpc::ByteBuffer* buffer,
                                   CallOutcome* outcome) {
  const absl::Time t0 = absl::Now();
  outcome->bytes_received = static_cast<int64_t>(buffer->Length());
  std::unique_ptr<Message> reply(prototype.New());
  const grpc::Status status = Traits::Deserialize(buffer, reply.get());
  outcome->marshal += absl::Now() - t0;
  if (!status.ok()) {
    outcome->code = absl::StatusCode::kInternal;
    outcome->message = absl::StrCat("the reply did not parse as ",
                                    prototype.GetDescriptor()->full_name(), ": ",
                                    status.error_message());
    return nullptr;
  }
  return reply;
}

void SetFailure(const absl::Status& status, CallOutcome* outcome) {
  outcome->code = status.code();
  outcome->message = std::string(status.message());
}

// Calls and streams are shared by gRPC (until their last reaction) and by a
// driver that cancels or closes them from another thread; each holds a
// count of references and deletes itself at zero. A driver takes its
// reference under its lock, while the object is still registered (objects
// unregister under that lock before dropping gRPC's reference), and uses it
// outside the lock: gRPC may run reactions inline from TryCancel or Start*,
// and those take the driver's lock.
// The attempts before the answering one, from the server's trailer
// (common/retry_metadata.h); 0 without it.
int PreviousAttempts(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kPreviousAttemptsTrailer);
  int attempts = 0;
  if (it == trailers.end() ||
      !absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &attempts)) {
    return 0;
  }
  return std::max(attempts, 0);
}

class RefCounted {
 public:
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  virtual ~RefCounted() = default;

 private:
  std::atomic<int> refs_{1};  // gRPC's
};

// ---------------------------------------------------------------- unary

class UnaryDriver final : public CallDriver {
 public:
  UnaryDriver(const ChannelPool* pool, const Workload* workload, absl::Duration deadline)
      : pool_(pool), workload_(workload), deadline_(deadline) {}

  void Issue(int lane, int payload, absl::Time start, CallDone done) override {
    auto* call = new Call;
    call->done = std::move(done);
    call->outcome.payload = payload;
    call->outcome.start = start;
    absl::Status status = Marshal(*workload_, payload, &call->request, &call->outcome);
    if (!status.ok()) {
      SetFailure(status, &call->outcome);
      call->outcome.end = absl::Now();
      call->done(call->outcome, nullptr);
      call->Unref();
      return;
    }
    SetDeadline(&call->context, deadline_);
    {
      absl::MutexLock lock(&mu_);
      live_.insert(call);
    }
    pool_->stub(lane).UnaryCall(&call->context, workload_->method, grpc::StubOptions(),
                                &call->request, &call->reply,
                                [this, call](grpc::Status s) { Finish(call, s); });
  }

  void CloseStreams() override {}

  void CancelAll() override {
    std::vector<Call*> calls;
    {
      absl::MutexLock lock(&mu_);
      for (Call* call : live_) {
        call->Ref();
        calls.push_back(call);
      }
    }
    for (Call* call : calls) {
      call->context.TryCancel();
      call->Unref();
    }
  }

  int64_t Live() const override {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(live_.size());
  }

 private:
  struct Call final : RefCounted {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
    CallOutcome outcome;
    CallDone done;
  };

  void Finish(Call* call, const grpc::Status& grpc_status) {
    call->outcome.retries = PreviousAttempts(call->context);
    std::unique_ptr<Message> reply;
    if (grpc_status.ok()) {
      reply = Unmarshal(*workload_->reply_prototype, &call->reply, &call->outcome);
    } else {
      SetFailure(client::FromGrpcStatus(grpc_status), &call->outcome);
    }
    call->outcome.end = absl::Now();
    call->done(call->outcome, reply.get());
    {
      absl::MutexLock lock(&mu_);
      live_.erase(call);
    }
    call->Unref();
  }

  const ChannelPool* const pool_;
  const Workload* const workload_;
  const absl::Duration deadline_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<Call*> live_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------- streams

class StreamDriver;

// One RotateStream call, matching replies to messages in order.
class StreamSession final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            public RefCounted {
 public:
  StreamSession(StreamDriver* driver, int lane, const Message* reply_prototype)
      : driver_(driver), lane_(lane), reply_prototype_(reply_prototype) {}

  // Opens the stream. Call once.
  void Start(grpc::GenericStub* stub, const std::string& method, absl::Duration deadline);

  // Queues request variant `payload` of `workload` and returns true; or
  // returns false, leaving `*done` untouched, when the stream is closing or
  // over (the caller opens a new one).
  bool Send(const Workload& workload, int payload, absl::Time start, CallDone* done);

  // Half-closes once the queued writes are out. Later Sends return false.
  void Close();
  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  struct Pending {
    CallOutcome outcome;
    CallDone done;
  };

  // Marks the session as refusing Sends and returns whether the caller
  // must now call RemoveHold (once no Send is between its check and its
  // StartWrite).
  bool WantRelease() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StreamDriver* const driver_;
  const int lane_;
  const Message* const reply_prototype_;
  grpc::ClientContext context_;
  grpc::ByteBuffer read_buffer_;  // used by the read chain only
  // The write in flight: set under mu_ when writing_ turns true, then left
  // alone until its OnWriteDone.
  grpc::ByteBuffer writing_buffer_;
  absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);  // sent, awaiting replies, in order
  std::deque<grpc::ByteBuffer> unwritten_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool over_ ABSL_GUARDED_BY(mu_) = false;
  // Send and Close start operations from outside gRPC's reactions, so the
  // session holds the call open (AddHold) while they may: without it the
  // call can end, and OnDone run, between a Send's check and its
  // StartWrite, which then touches a finished call. The hold goes once the
  // session refuses Sends (closing, or its reads ended) and no Send is
  // still starting a write.
  bool held_ ABSL_GUARDED_BY(mu_) = true;
  bool release_wanted_ ABSL_GUARDED_BY(mu_) = false;
  int starting_writes_ ABSL_GUARDED_BY(mu_) = 0;
};

class StreamDriver final : public CallDriver {
 public:
  StreamDriver(const ChannelPool* pool, const Workload* workload, absl::Duration deadline)
      : pool_(pool), workload_(workload), deadline_(deadline) {}

  void Issue(int lane, int payload, absl::Time start, CallDone done) override {
    // Bounded: a session that refuses (closing, or just ended) is replaced
    // once; a second refusal fails the request.
    for (int attempt = 0; attempt < 2; ++attempt) {
      StreamSession* session = SessionFor(lane);
      const bool sent = session->Send(*workload_, payload, start, &done);
      if (!sent) Unregister(lane, session, /*drop_from_all=*/false);
      session->Unref();
      if (sent) return;
    }
    CallOutcome outcome;
    outcome.payload = payload;
    outcome.start = start;
    outcome.end = absl::Now();
    outcome.code = absl::StatusCode::kUnavailable;
    outcome.message = "RotateStream: no stream accepted the message (streams kept ending)";
    done(outcome, nullptr);
  }

  void CloseStreams() override {
    for (StreamSession* s : TakeRefs(/*detach_lanes=*/true)) {
      s->Close();
      s->Unref();
    }
  }

  void CancelAll() override {
    for (StreamSession* s : TakeRefs(/*detach_lanes=*/false)) {
      s->Cancel();
      s->Unref();
    }
  }

  int64_t Live() const override {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(all_.size());
  }

  // Called by a session in OnDone, before it reports its orphaned messages
  // (so that they can Issue again on a new stream) and before it drops
  // gRPC's reference.
  void Unregister(int lane, StreamSession* session, bool drop_from_all) {
    absl::MutexLock lock(&mu_);
    if (lane < static_cast<int>(lanes_.size()) && lanes_[lane] == session) lanes_[lane] = nullptr;
    if (drop_from_all) all_.erase(session);
  }

 private:
  // The lane's open session, with a reference for the caller.
  StreamSession* SessionFor(int lane) {
    StreamSession* session = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (lane >= static_cast<int>(lanes_.size())) lanes_.resize(lane + 1, nullptr);
      if (lanes_[lane] != nullptr) {
        lanes_[lane]->Ref();
        return lanes_[lane];
      }
      session = new StreamSession(this, lane, workload_->reply_prototype.get());
      session->Ref();
      lanes_[lane] = session;
      all_.insert(session);
    }
    session->Start(&pool_->stub(lane), workload_->method, deadline_);
    return session;
  }

  std::vector<StreamSession*> TakeRefs(bool detach_lanes) {
    absl::MutexLock lock(&mu_);
    std::vector<StreamSession*> sessions;
    for (StreamSession* s : all_) {
      s->Ref();
      sessions.push_back(s);
    }
    if (detach_lanes) lanes_.assign(lanes_.size(), nullptr);
    return sessions;
  }

  const ChannelPool* const pool_;
  const Workload* const workload_;
  const absl::Duration deadline_;
  mutable absl::Mutex mu_;
  std::vector<StreamSession*> lanes_ ABSL_GUARDED_BY(mu_);  // the open session of each lane
  absl::flat_hash_set<StreamSession*> all_ ABSL_GUARDED_BY(mu_);  // every session not over
};

void StreamSession::Start(grpc::GenericStub* stub, const std::string& method,
                          absl::Duration deadline) {
  SetDeadline(&context_, deadline);
  stub->PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
  AddHold();
  StartRead(&read_buffer_);
  StartCall();
}

bool StreamSession::WantRelease() {
  release_wanted_ = true;
  if (!held_ || starting_writes_ > 0) return false;
  held_ = false;
  return true;
}

bool StreamSession::Send(const Workload& workload, int payload, absl::Time start,
                         CallDone* done) {
  {
    absl::MutexLock lock(&mu_);
    if (closing_ || over_ || release_wanted_) return false;
  }
  Pending pending;
  pending.outcome.payload = payload;
  pending.outcome.start = start;
  grpc::ByteBuffer buffer;
  absl::Status status = Marshal(workload, payload, &buffer, &pending.outcome);
  if (!status.ok()) {
    SetFailure(status, &pending.outcome);
    pending.outcome.end = absl::Now();
    (*done)(pending.outcome, nullptr);
    return true;  // reported
  }
  bool start_write = false;
  {
    absl::MutexLock lock(&mu_);
    if (closing_ || over_ || release_wanted_) return false;
    pending.done = std::move(*done);
    pending_.push_back(std::move(pending));
    if (writing_) {
      unwritten_.push_back(std::move(buffer));
    } else {
      writing_ = true;
      writing_buffer_ = std::move(buffer);
      start_write = true;
      ++starting_writes_;
    }
  }
  if (start_write) {
    StartWrite(&writing_buffer_);
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      --starting_writes_;
      if (release_wanted_) release = WantRelease();
    }
    if (release) RemoveHold();
  }
  return true;
}

void StreamSession::Close() {
  bool writes_done = false;
  bool release = false;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    if (!writing_ && !writes_done_ && !over_ && held_) writes_done = writes_done_ = true;
    release = WantRelease();
  }
  if (writes_done) StartWritesDone();
  if (release) RemoveHold();
}

void StreamSession::OnWriteDone(bool ok) {
  bool write = false;
  bool writes_done = false;
  {
    absl::MutexLock lock(&mu_);
    if (ok && !unwritten_.empty()) {
      writing_buffer_ = std::move(unwritten_.front());
      unwritten_.pop_front();
      write = true;
    } else {
      writing_ = false;
      // A failed write means the stream is over: OnDone reports the rest.
      if (!ok) unwritten_.clear();
      if (ok && closing_ && !writes_done_) writes_done = writes_done_ = true;
    }
  }
  if (write) StartWrite(&writing_buffer_);
  if (writes_done) StartWritesDone();
}

void StreamSession::OnReadDone(bool ok) {
  if (!ok) {  // the stream is over; OnDone follows once the hold is gone
    bool release = false;
    {
      absl::MutexLock lock(&mu_);
      release = WantRelease();
    }
    if (release) RemoveHold();
    return;
  }
  Pending pending;
  bool stray_reply = false;
  {
    absl::MutexLock lock(&mu_);
    if (pending_.empty()) {
      stray_reply = true;
    } else {
      pending = std::move(pending_.front());
      pending_.pop_front();
    }
  }
  if (stray_reply) {
    // More replies than messages: the server broke RotateStream's contract.
    // Ending the stream reports the messages still pending.
    context_.TryCancel();
    return;
  }
  std::unique_ptr<Message> reply = Unmarshal(*reply_prototype_, &read_buffer_, &pending.outcome);
  pending.outcome.end = absl::Now();
  // Ask for the next reply before reporting this one: the report may Send.
  StartRead(&read_buffer_);
  pending.done(pending.outcome, reply.get());
}

void StreamSession::OnDone(const grpc::Status& grpc_status) {
  std::deque<Pending> orphans;
  {
    absl::MutexLock lock(&mu_);
    over_ = true;
    orphans.swap(pending_);
  }
  driver_->Unregister(lane_, this, /*drop_from_all=*/false);
  absl::Status status = client::FromGrpcStatus(grpc_status);
  if (status.ok()) {
    status = absl::InternalError("RotateStream ended (OK) before replying to this message");
  }
  const absl::Time end = absl::Now();
  for (Pending& p : orphans) {
    SetFailure(status, &p.outcome);
    p.outcome.end = end;
    p.done(p.outcome, nullptr);
  }
  driver_->Unregister(lane_, this, /*drop_from_all=*/true);
  Unref();
}

}  // namespace

std::unique_ptr<CallDriver> NewCallDriver(const ChannelPool* pool, const Workload* workload,
                                          absl::Duration deadline) {
  if (workload->streaming()) return std::make_unique<StreamDriver>(pool, workload, deadline);
  return std::make_unique<UnaryDriver>(pool, workload, deadline);
}

}  // namespace load
}  // namespace rope
