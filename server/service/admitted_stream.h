// AdmittedStream: the skeleton of a bidirectional stream served strictly one
// message at a time (read, admit, answer on the work queue, write, read the
// next), so replies come in request order: RotateStream and KServe's
// ModelStreamInfer.
//
// The methods are registered raw (gRPC hands over each message's wire
// bytes), and each message is admitted like a raw unary call (unary_call.h
// ServeRawUnary, call_admission.h): it takes a gate slot when it arrives,
// is charged its wire bytes plus what parsing them allocates
// (ParsedSizeBound) before it is parsed, and what answering it allocates
// before any work; malformed bytes end the stream INVALID_ARGUMENT naming
// the message type. The
// slot and the bytes go back once its reply is written (or its send deadline
// has cancelled the stream: call_admission.h). An idle stream (one
// waiting for its next message) holds neither, and no large message's
// buffers either, so streams that never send cannot take the slots or the
// memory of other calls; what bounds them is the per-connection stream cap
// (--max_streams_per_connection), the client's count of open streams and the
// idle timeout (stream_limits.h: a stream over its client's count is refused
// at open, an idle one finished UNAVAILABLE). A refusal by the
// gate (a full server, a client over its share, a drain) ends the stream
// with its status; the client retries that message elsewhere or later.
//
// A subclass says what a message costs (Prepare), answers it (Answer) and
// how a failed message is told (MessageFailed: end the stream, or reply
// with the error in band). Deletes itself in OnDone.
#ifndef ROPE_SERVICE_ADMITTED_STREAM_H_
#define ROPE_SERVICE_ADMITTED_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/call_admission.h"
#include "server/service/raw_message.h"
#include "server/service/reply_writer.h"
#include "server/service/status_conversion.h"
#include "server/service/stream_limits.h"
#include "server/service/work_queue.h"

namespace rope {

// `Request` and `Response` are the method's message types, parsed from and
// serialized into the raw stream's ByteBuffers.
template <typename Request, typename Response>
class AdmittedStream : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  void OnReadDone(bool ok) final {
    if (stream_.StopIdle()) return;  // finished for idling: nothing more to do
    if (!ok) {  // the client half-closed (or the call is gone): end cleanly
      stream_.Release();
      this->Finish(grpc::Status::OK);
      return;
    }
    absl::Status admitted = admission_.Enter(static_cast<int64_t>(request_wire_.Length()));
    if (!admitted.ok()) {
      EndStream(admitted);
      return;
    }
    // What the parse will allocate, read from the wire bytes without
    // parsing them; malformed bytes are refused here, as the parse would.
    const absl::StatusOr<int64_t> parsed_bytes =
        ParsedBoundOf(*Request::descriptor(), request_wire_);
    if (!parsed_bytes.ok()) {
      EndStream(parsed_bytes.status());
      return;
    }
    if (admission_.TryChargeParse(*parsed_bytes)) {
      ParseMessage();
      return;
    }
    // It must wait for room (or be refused). Unless it is refused for being
    // larger than the whole budget, its wire bytes leave gRPC's buffer
    // meanwhile (raw_message.h CopyWire).
    const int64_t budget_bytes = budget_bytes_;
    if (budget_bytes <= 0 || admission_.request_bytes() + *parsed_bytes <= budget_bytes) {
      detached_wire_ = CopyWire(request_wire_);
      wire_detached_ = true;
      request_wire_.Clear();
    }
    admission_.ChargeParse(*parsed_bytes, absl::FromChrono(context_->deadline()),
                           [this](absl::Status granted) {
                             if (!granted.ok()) {
                               FreeWire();
                               MessageFailed(granted);
                               return;
                             }
                             ParseMessage();
                           });
  }

  void OnWriteDone(bool ok) final {
    if (!ok) {
      stream_.Release();
      this->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                absl::StrCat(RpcName(admission_.rpc()),
                                             ": a reply could not be sent (the client has gone)")));
      return;
    }
    admission_.Done();
    ClearMessage();
    reply_wire_.Clear();
    FreeWire();
    if (request_.ByteSizeLong() <= kKeptCapacityBytes) {
      // Clear keeps the strings' capacity: the next parse reuses it.
      request_.Clear();
    } else {
      // An idle stream holds no budget, so it must not keep a large
      // message's buffers either.
      request_ = Request();
    }
    ReadNext();
  }

  void OnDone() final {
    stream_.Close();
    admission_.Done();
    delete this;
  }

 protected:
  // `client` (caller_identity.h; empty: none) is held to its share of the
  // gate for each message. The subclass's constructor calls StartReading()
  // last.
  AdmittedStream(const AdmissionParts& parts, WorkQueue& work, Rpc rpc,
                 grpc::CallbackServerContext* context, std::string client)
      : admission_(parts, rpc, std::move(client)),
        budget_bytes_(parts.budget != nullptr ? parts.budget->budget_bytes() : 0),
        stream_(parts.streams, RpcName(rpc)),
        work_(work),
        context_(context) {}
  ~AdmittedStream() override = default;

  // Opens the stream (refused with its status when its client has too many
  // open) and reads the first message.
  void StartReading() {
    absl::Status opened = stream_.Open(*context_);
    if (!opened.ok()) {
      EndStream(opened);
      return;
    }
    ReadNext();
  }

  // The message in hand has been admitted (it holds a slot): checks it and
  // returns what answering it allocates beside the request (charged to the
  // byte budget before Answer runs), or the error that MessageFailed tells.
  virtual absl::StatusOr<int64_t> Prepare() = 0;
  // On the work queue, once charged and if the caller still waits: answers
  // the message in hand into response_. An error goes to MessageFailed.
  virtual absl::Status Answer() = 0;
  // The message in hand failed (Prepare, the byte charge or Answer): either
  // EndStream(status), or fill response_ with the error and Reply().
  virtual void MessageFailed(const absl::Status& status) = 0;
  // The message in hand's reply has been written: drop what the subclass
  // keeps for it.
  virtual void ClearMessage() {}

  // Records the message in hand and ends the stream with `status`.
  void EndStream(const absl::Status& status) {
    grpc::Status grpc_status = ToGrpcStatus(status);
    admission_.Record(grpc_status.error_code(), 0);
    stream_.Release();
    this->Finish(std::move(grpc_status));
  }

  // The message in hand's OK reply, when the subclass writes its bytes
  // itself (reply_writer.h) rather than filling response_; null: response_
  // is serialized. Valid until ClearMessage.
  virtual ReplyWriter* AnsweredReply() { return nullptr; }

  // Records the message in hand as answered with `code` and writes
  // response_ (its results, or an error told in band), serialized, or an OK
  // reply's AnsweredReply; the message itself is freed then (its bytes stay
  // charged until written).
  void Reply(grpc::StatusCode code) {
    ReplyWriter* writer = code == grpc::StatusCode::OK ? AnsweredReply() : nullptr;
    int64_t reply_bytes = 0;
    absl::Status serialized;
    if (writer != nullptr) {
      reply_bytes = writer->ReplyBytes();
      serialized = writer->WriteReply(&reply_wire_);
      ReleaseResponse(0);
    } else {
      reply_bytes = static_cast<int64_t>(response_.ByteSizeLong());
      // Its size is cached just above: one pass, into one slice.
      serialized = SerializeReply(response_, absl::StrCat(RpcName(admission_.rpc()), " reply"),
                                  &reply_wire_);
      ReleaseResponse(reply_bytes);
    }
    if (!serialized.ok()) {
      EndStream(serialized);
      return;
    }
    admission_.Record(code, code == grpc::StatusCode::OK ? reply_bytes : 0);
    // Disarmed once written (OnWriteDone) or when the call ends (OnDone).
    admission_.WatchSend(context_);
    this->StartWrite(&reply_wire_);
  }

  const CallAdmission& admission() const { return admission_; }
  grpc::CallbackServerContext* context() const { return context_; }

  Request request_;
  Response response_;

 private:
  // The message in hand's wire bytes (gRPC's buffer), or their copy while
  // it waits for its parse's charge.
  grpc::ByteBuffer request_wire_;
  bool wire_detached_ = false;
  std::string detached_wire_;
  // The reply being written.
  grpc::ByteBuffer reply_wire_;

  // Buffers an idle stream may keep for its next message (uncharged).
  static constexpr size_t kKeptCapacityBytes = size_t{1} << 20;

  // Waits for the next message, for the idle timeout at most.
  void ReadNext() {
    stream_.StartIdle([this](grpc::Status status) { this->Finish(std::move(status)); });
    this->StartRead(&request_wire_);
  }

  // The message in hand is charged (wire + parsed bound): parses it, frees
  // its wire bytes and returns their charge (the parsed bytes stay charged
  // until its reply is written), then charges what answering it allocates
  // and schedules the answer. Runs on the gRPC thread that granted the
  // charge (this stream's, or the one whose call released the bytes).
  void ParseMessage() {
    const bool parsed = wire_detached_ ? request_.ParseFromString(detached_wire_)
                                       : ParseWire(request_wire_, &request_);
    FreeWire();
    admission_.ReturnWireBytes();
    if (!parsed) {
      EndStream(NotParsedError(*Request::descriptor(), admission_.request_bytes()));
      return;
    }
    absl::StatusOr<int64_t> more_bytes = Prepare();
    if (!more_bytes.ok()) {
      MessageFailed(more_bytes.status());
      return;
    }
    admission_.Charge(*more_bytes, absl::FromChrono(context_->deadline()),
                      [this](absl::Status granted) {
                        if (!granted.ok()) {
                          MessageFailed(granted);
                          return;
                        }
                        work_.Schedule([this] { AnswerMessage(); }, admission_.client());
                      });
  }

  // Frees the message in hand's wire bytes (gRPC's buffer, or the copy).
  void FreeWire() {
    request_wire_.Clear();
    if (wire_detached_) {
      std::string().swap(detached_wire_);
      wire_detached_ = false;
    }
  }

  // Frees the serialized reply message, keeping a small one's capacity
  // for the next (an idle stream holds no budget, so no large buffers).
  void ReleaseResponse(int64_t reply_bytes) {
    if (reply_bytes <= static_cast<int64_t>(kKeptCapacityBytes)) {
      response_.Clear();
    } else {
      response_ = Response();
    }
  }

  void AnswerMessage() {
    absl::Status wanted = admission_.CheckStillWanted(*context_);
    if (!wanted.ok()) {
      EndStream(wanted);
      return;
    }
    absl::Status status = Answer();
    if (!status.ok()) {
      MessageFailed(status);
      return;
    }
    Reply(grpc::StatusCode::OK);
  }

  CallAdmission admission_;
  const int64_t budget_bytes_;  // the byte budget's whole size (<= 0: none)
  StreamHold stream_;
  WorkQueue& work_;
  grpc::CallbackServerContext* const context_;
};

}  // namespace rope

#endif  // ROPE_SERVICE_ADMITTED_STREAM_H_
