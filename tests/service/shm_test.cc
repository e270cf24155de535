// Shared memory (RegisterSharedMemory and tensors by reference) and the Unix
// socket listener, against a real in-process server and real POSIX
// shared-memory objects.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/shared_region.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "core/proto_engine/shm_calls.h"
#include "core/proto_engine/shm_registry.h"
#include "tests/service/service_fixture.h"
#include "tests/support/grpc_test_util.h"
#include "tests/support/status_matchers.h"

namespace rope {
namespace test {
namespace {

using client::SharedRegion;

std::unique_ptr<SharedRegion> NewRegion(const std::string& name, size_t bytes) {
  absl::StatusOr<std::unique_ptr<SharedRegion>> region = SharedRegion::Create(name, bytes);
  EXPECT_TRUE(region.ok()) << region.status();
  return region.ok() ? *std::move(region) : nullptr;
}

class ShmServiceTest : public ServiceTest {
 protected:
  void SetUp() override {
    // Clients are told apart by identity, not by connection: every channel
    // to the TCP port comes from 127.0.0.1 (one client), so "another client"
    // here is a channel over the Unix socket ("peer:unix:...").
    socket_path_ = absl::StrCat("/tmp/rope-shm-test-", getpid(), ".sock");
    ServerOptions options = DefaultOptions();
    options.shm.max_regions_per_client = 3;
    options.shm.max_mapped_bytes = 1 << 22;
    options.unix_socket_paths = {socket_path_};
    StartServer(options);
  }

  // A client other than stub_'s: its own connection over the Unix socket.
  std::unique_ptr<v1::RopeService::Stub> OtherClient() const {
    return v1::RopeService::NewStub(grpc::CreateChannel(absl::StrCat("unix://", socket_path_),
                                                        grpc::InsecureChannelCredentials()));
  }

  grpc::Status Register(v1::RopeService::Stub* stub, const SharedRegion& region) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RegisterSharedMemoryResponse reply;
    return stub->RegisterSharedMemory(&context, region.RegisterRequest(), &reply);
  }
  grpc::Status Register(const v1::RegisterSharedMemoryRequest& request) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RegisterSharedMemoryResponse reply;
    return stub_->RegisterSharedMemory(&context, request, &reply);
  }
  grpc::Status Rotate(const v1::RotateRequest& request, v1::RotateResponse* reply,
                      v1::RopeService::Stub* stub = nullptr) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return (stub != nullptr ? stub : stub_.get())->Rotate(&context, request, reply);
  }
  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name);
    v1::UnregisterSharedMemoryResponse reply;
    return stub_->UnregisterSharedMemory(&context, request, &reply);
  }

  // q [1, 8, 2, 16] float32 (1024 bytes) by bytes, and its rotation by bytes.
  void MakeQ(v1::RotateRequest* by_bytes, std::string* rotated) {
    *by_bytes = MakeRotateRequest(1, 8, 2, 16, 64, 3);
    v1::RotateResponse reply;
    ASSERT_TRUE(Rotate(*by_bytes, &reply).ok());
    *rotated = reply.q().data();
  }

  // by_bytes' q moved into `region` at `offset`, referenced.
  v1::RotateRequest ByReference(const v1::RotateRequest& by_bytes, const SharedRegion& region,
                                uint64_t offset) {
    v1::RotateRequest request = by_bytes;
    const std::string& data = by_bytes.q().data();
    std::memcpy(region.data() + offset, data.data(), data.size());
    request.mutable_q()->clear_data();
    *request.mutable_q()->mutable_shm() = region.Ref(offset, data.size());
    return request;
  }
  std::string socket_path_;
};

TEST_F(ShmServiceTest, RotatesInPlaceInTheRegionAsTheBytesPathDoes) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("inplace", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  v1::RotateResponse reply;
  ASSERT_TRUE(Rotate(ByReference(by_bytes, *region, 256), &reply).ok());
  EXPECT_TRUE(reply.q().data().empty());
  EXPECT_EQ(reply.q().shm().region(), "inplace");
  EXPECT_EQ(reply.q().shm().offset(), 256u);
  EXPECT_EQ(reply.q().shape_size(), 4);
  EXPECT_EQ(std::string(region->data() + 256, expected.size()), expected);
}

TEST_F(ShmServiceTest, RotatesIntoAnOutputReferenceLeavingTheInput) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("out", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  v1::RotateRequest request = ByReference(by_bytes, *region, 0);
  *request.mutable_q_out() = region->Ref(2048, expected.size());
  v1::RotateResponse reply;
  ASSERT_TRUE(Rotate(request, &reply).ok());
  EXPECT_EQ(reply.q().shm().offset(), 2048u);
  EXPECT_EQ(std::string(region->data(), expected.size()), by_bytes.q().data());
  EXPECT_EQ(std::string(region->data() + 2048, expected.size()), expected);

  // Bytes in, reference out.
  v1::RotateRequest bytes_in = by_bytes;
  *bytes_in.mutable_q_out() = region->Ref(1024, expected.size());
  ASSERT_TRUE(Rotate(bytes_in, &reply).ok());
  EXPECT_EQ(std::string(region->data() + 1024, expected.size()), expected);
}

TEST_F(ShmServiceTest, RotateStreamTakesReferencesAndBytesAlike) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("stream", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stream = stub_->RotateStream(&context);
  ASSERT_TRUE(stream->Write(ByReference(by_bytes, *region, 0)));
  ASSERT_TRUE(stream->Write(by_bytes));
  stream->WritesDone();
  v1::RotateResponse first, second;
  ASSERT_TRUE(stream->Read(&first));
  ASSERT_TRUE(stream->Read(&second));
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(first.q().shm().region(), "stream");
  EXPECT_EQ(std::string(region->data(), expected.size()), expected);
  EXPECT_EQ(second.q().data(), expected);
}

TEST_F(ShmServiceTest, AnotherClientCannotTouchTheRegion) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("mine", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  // Another peer is another client.
  auto other = OtherClient();
  v1::RotateResponse reply;
  EXPECT_TRUE(GrpcStatusIs(Rotate(ByReference(by_bytes, *region, 0), &reply, other.get()),
                           grpc::StatusCode::NOT_FOUND,
                           "q.shm.region \"mine\" is not registered by this client"));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::UnregisterSharedMemoryRequest unregister;
  unregister.set_name("mine");
  v1::UnregisterSharedMemoryResponse unregistered;
  EXPECT_EQ(other->UnregisterSharedMemory(&context, unregister, &unregistered).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // The owner still can; the other may register the same name for itself.
  EXPECT_TRUE(Rotate(ByReference(by_bytes, *region, 0), &reply).ok());
  EXPECT_TRUE(Register(other.get(), *region).ok());
}

TEST_F(ShmServiceTest, BadReferencesAreRefusedBeforeAnyWork) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("bad", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  const v1::RotateRequest good = ByReference(by_bytes, *region, 0);
  const std::string before(region->data(), 4096);
  v1::RotateResponse reply;

  v1::RotateRequest past = good;
  past.mutable_q()->mutable_shm()->set_offset(4096 - 512);
  EXPECT_TRUE(GrpcStatusIs(Rotate(past, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.shm: offset 3584 + byte_size 1024 is past the end of region "
                           "\"bad\" (4096 bytes)"));
  v1::RotateRequest overflow = good;
  overflow.mutable_q()->mutable_shm()->set_offset(UINT64_MAX - 100);
  EXPECT_TRUE(GrpcStatusIs(Rotate(overflow, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "is past the end of region"));
  v1::RotateRequest misaligned = good;
  misaligned.mutable_q()->mutable_shm()->set_offset(2);
  EXPECT_TRUE(GrpcStatusIs(Rotate(misaligned, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "q.shm.offset 2 is not aligned to the 4-byte elements"));
  v1::RotateRequest wrong_size = good;
  wrong_size.mutable_q()->mutable_shm()->set_byte_size(1020);
  EXPECT_EQ(Rotate(wrong_size, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::RotateRequest both = good;
  both.mutable_q()->set_data(std::string(1024, '\0'));
  EXPECT_TRUE(GrpcStatusIs(Rotate(both, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "q has both data (1024 bytes) and shm"));
  v1::RotateRequest overlap = good;
  *overlap.mutable_q_out() = region->Ref(512, 1024);
  EXPECT_TRUE(GrpcStatusIs(Rotate(overlap, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "q_out [512, 1536) overlaps q.shm [0, 1024)"));
  v1::RotateRequest out_size = good;
  *out_size.mutable_q_out() = region->Ref(2048, 512);
  EXPECT_TRUE(GrpcStatusIs(Rotate(out_size, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "q_out.byte_size is 512: q is 1024 bytes"));
  // k in place over q's bytes, q in place: the outputs overlap.
  v1::RotateRequest shared_kq = good;
  *shared_kq.mutable_k() = shared_kq.q();
  EXPECT_TRUE(GrpcStatusIs(Rotate(shared_kq, &reply), grpc::StatusCode::INVALID_ARGUMENT,
                           "overlaps"));
  v1::RotateRequest unknown = good;
  unknown.mutable_q()->mutable_shm()->set_region("nope");
  EXPECT_TRUE(GrpcStatusIs(Rotate(unknown, &reply), grpc::StatusCode::NOT_FOUND,
                           "q.shm.region \"nope\" is not registered by this client"));
  // Nothing was written, and a good call still works.
  EXPECT_EQ(std::string(region->data(), 4096), before);
  ASSERT_TRUE(Rotate(good, &reply).ok());
  EXPECT_EQ(std::string(region->data(), expected.size()), expected);
}

TEST_F(ShmServiceTest, RegistrationErrorsAreSpecific) {
  auto region = NewRegion("reg", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  EXPECT_TRUE(GrpcStatusIs(Register(stub_.get(), *region), grpc::StatusCode::ALREADY_EXISTS,
                           "region \"reg\" is already registered"));
  v1::RegisterSharedMemoryRequest request = region->RegisterRequest();
  request.set_name("missing");
  request.set_key("/rope-no-such-object-for-this-test");
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::NOT_FOUND,
                           "key \"/rope-no-such-object-for-this-test\" cannot be opened"));
  request = region->RegisterRequest();
  request.set_name("toolong");
  request.set_offset(100);
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::INVALID_ARGUMENT,
                           "offset 100 + byte_size 4096 is past the end of"));
  request = region->RegisterRequest();
  request.set_name("bad name!");
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::INVALID_ARGUMENT,
                           "name is \"bad name!\""));
  request = region->RegisterRequest();
  request.set_name("file");
  request.set_key("/tmp/x/../etc");
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::PERMISSION_DENIED,
                           "--shm_allowed_dir unset"));
  request.set_key("relative");
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::INVALID_ARGUMENT,
                           "key is \"relative\""));
  EXPECT_TRUE(GrpcStatusIs(Unregister("nope"), grpc::StatusCode::NOT_FOUND,
                           "region \"nope\" is not registered by this client"));
}

TEST_F(ShmServiceTest, AReconnectingClientKeepsItsRegionsAndItsLimit) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("kept", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  // A new connection from the same host (as after --max_connection_age):
  // the same client, its region still there.
  auto reconnected = v1::RopeService::NewStub(NewChannel());
  v1::RotateResponse reply;
  EXPECT_TRUE(Rotate(ByReference(by_bytes, *region, 0), &reply, reconnected.get()).ok());
  // Reconnecting does not renew the per-client limit (3): 2 more regions
  // over 2 more connections, then the fourth is refused on a fifth.
  std::vector<std::unique_ptr<SharedRegion>> more;
  for (int i = 0; i < 2; ++i) {
    more.push_back(NewRegion(absl::StrCat("more", i), 4096));
    auto connection = v1::RopeService::NewStub(NewChannel());
    ASSERT_TRUE(Register(connection.get(), *more.back()).ok());
  }
  auto fourth = NewRegion("fourth", 4096);
  auto fifth_connection = v1::RopeService::NewStub(NewChannel());
  EXPECT_TRUE(GrpcStatusIs(Register(fifth_connection.get(), *fourth),
                           grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "--shm_max_regions_per_client 3"));
  EXPECT_EQ(server_->shm().regions(), 3);
}

TEST_F(ShmServiceTest, SparseObjectsAreRefused) {
  const std::string key = absl::StrCat("/rope-sparse-test-", getpid());
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  // Sized, never written: every page is a hole the server would allocate.
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  v1::RegisterSharedMemoryRequest request;
  request.set_name("sparse");
  request.set_key(key);
  request.set_byte_size(1 << 20);
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::FAILED_PRECONDITION,
                           "has 0 of its 1048576 bytes allocated (a sparse object)"));
  // Allocated, it registers; a hole punched later refuses the next use.
  ASSERT_EQ(posix_fallocate(fd, 0, 1 << 20), 0);
  ASSERT_TRUE(Register(request).ok());
  ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 16), 0);
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  v1::RotateRequest by_reference = by_bytes;
  by_reference.mutable_q()->clear_data();
  by_reference.mutable_q()->mutable_shm()->set_region("sparse");
  by_reference.mutable_q()->mutable_shm()->set_byte_size(by_bytes.q().data().size());
  v1::RotateResponse reply;
  EXPECT_TRUE(GrpcStatusIs(Rotate(by_reference, &reply), grpc::StatusCode::FAILED_PRECONDITION,
                           "a sparse object"));
  close(fd);
  shm_unlink(key.c_str());
}

TEST_F(ShmServiceTest, LimitsAreResourceExhaustedNamingTheFlag) {
  auto big = NewRegion("big", (1 << 22) + 4096);
  EXPECT_TRUE(GrpcStatusIs(Register(stub_.get(), *big), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "--shm_max_mapped_bytes 4194304"));
  std::vector<std::unique_ptr<SharedRegion>> regions;
  for (int i = 0; i < 3; ++i) {
    regions.push_back(NewRegion(absl::StrCat("r", i), 1 << 20));
    ASSERT_TRUE(Register(stub_.get(), *regions.back()).ok());
  }
  auto fourth = NewRegion("r3", 4096);
  EXPECT_TRUE(GrpcStatusIs(Register(stub_.get(), *fourth), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "--shm_max_regions_per_client 3"));
  // Another client: its own count, the shared byte total.
  auto other = OtherClient();
  auto large = NewRegion("large", 1 << 21);
  EXPECT_TRUE(GrpcStatusIs(Register(other.get(), *large), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "would bring the mapped total to 5242880"));
  EXPECT_TRUE(Register(other.get(), *fourth).ok());

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.limits().shm_max_regions_per_client(), 3);
  EXPECT_EQ(info.limits().shm_max_mapped_bytes(), 1 << 22);
  EXPECT_EQ(info.shm_regions(), 4);
  EXPECT_EQ(info.shm_mapped_bytes(), 3 * (1 << 20) + 4096);

  ASSERT_TRUE(Unregister("").ok());  // all of this client's
  EXPECT_EQ(server_->shm().regions(), 1);
}

TEST_F(ShmServiceTest, UnregisteredRegionAnswersNotFoundAndStatusListsRegions) {
  auto a = NewRegion("a", 4096);
  auto b = NewRegion("b", 8192);
  ASSERT_TRUE(Register(stub_.get(), *b).ok());
  ASSERT_TRUE(Register(stub_.get(), *a).ok());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::SharedMemoryStatusResponse status;
  ASSERT_TRUE(
      stub_->SharedMemoryStatus(&context, v1::SharedMemoryStatusRequest(), &status).ok());
  ASSERT_EQ(status.regions_size(), 2);
  EXPECT_EQ(status.regions(0).name(), "a");
  EXPECT_EQ(status.regions(1).byte_size(), 8192u);
  EXPECT_EQ(status.regions(1).key(), b->key());

  ASSERT_TRUE(Unregister("a").ok());
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  v1::RotateResponse reply;
  EXPECT_TRUE(GrpcStatusIs(Rotate(ByReference(by_bytes, *a, 0), &reply),
                           grpc::StatusCode::NOT_FOUND, "q.shm.region \"a\""));
}

TEST_F(ShmServiceTest, RegionTruncatedAfterRegistrationIsFailedPrecondition) {
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  auto region = NewRegion("shrinks", 8192);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  const v1::RotateRequest request = ByReference(by_bytes, *region, 0);
  ASSERT_EQ(ftruncate(region->fd(), 100), 0);
  v1::RotateResponse reply;
  EXPECT_TRUE(GrpcStatusIs(Rotate(request, &reply), grpc::StatusCode::FAILED_PRECONDITION,
                           "is now 100 bytes, short of the registered offset 0 + byte_size 8192"));
  // Other calls are undisturbed.
  EXPECT_TRUE(Rotate(by_bytes, &reply).ok());
}

// Calls by reference racing a client that shrinks and unregisters the region
// under them: each call ends OK, FAILED_PRECONDITION or NOT_FOUND, the
// server survives (SIGBUS guarded), and a bytes call still works afterwards.
TEST_F(ShmServiceTest, CallsRacingTruncationAndUnregistrationEndCleanly) {
  const v1::RotateRequest by_bytes = MakeRotateRequest(1, 256, 8, 64, 512, 0, 9);  // 512 KiB
  const size_t bytes = by_bytes.q().data().size();
  for (int round = 0; round < 3; ++round) {
    auto region = NewRegion(absl::StrCat("race", round), 2 * bytes);
    ASSERT_TRUE(Register(stub_.get(), *region).ok());
    const v1::RotateRequest request = ByReference(by_bytes, *region, bytes);
    std::vector<grpc::StatusCode> codes(8);
    std::vector<std::thread> callers;
    for (size_t i = 0; i < codes.size(); ++i) {
      callers.emplace_back([&, i] {
        v1::RotateResponse reply;
        codes[i] = Rotate(request, &reply).error_code();
      });
    }
    absl::SleepFor(absl::Milliseconds(1 + round));
    ASSERT_EQ(ftruncate(region->fd(), 4096), 0);
    if (round != 1) {
      ASSERT_TRUE(Unregister(region->name()).ok());
    }
    for (std::thread& t : callers) t.join();
    for (grpc::StatusCode code : codes) {
      EXPECT_TRUE(code == grpc::StatusCode::OK || code == grpc::StatusCode::FAILED_PRECONDITION ||
                  code == grpc::StatusCode::NOT_FOUND)
          << code;
    }
    v1::RotateResponse reply;
    if (round == 1) {  // still registered, now short: refused before any work
      EXPECT_EQ(Rotate(request, &reply).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    }
    EXPECT_TRUE(Rotate(by_bytes, &reply).ok());
  }
}

TEST_F(ShmServiceTest, AttentionScoresWritesIntoRegions) {
  const v1::RotateRequest rq = MakeRotateRequest(1, 4, 2, 16, 64, 0, 5);
  const v1::RotateRequest rk = MakeRotateRequest(1, 6, 2, 16, 64, 0, 6);
  v1::AttentionScoresRequest request;
  *request.mutable_config() = rq.config();
  *request.mutable_q() = rq.q();
  *request.mutable_k() = rk.q();
  *request.mutable_v() = rk.q();
  request.set_softmax(true);
  v1::AttentionScoresResponse by_bytes;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->AttentionScores(&context, request, &by_bytes).ok());
  }
  auto region = NewRegion("scores", 8192);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  const std::string k = request.k().data();
  std::memcpy(region->data(), k.data(), k.size());
  request.mutable_k()->clear_data();
  *request.mutable_k()->mutable_shm() = region->Ref(0, k.size());
  const size_t scores_bytes = by_bytes.scores().data().size();
  const size_t output_bytes = by_bytes.output().data().size();
  *request.mutable_scores_out() = region->Ref(k.size(), scores_bytes);
  *request.mutable_output_out() = region->Ref(k.size() + scores_bytes, output_bytes);
  v1::AttentionScoresResponse reply;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::Status status = stub_->AttentionScores(&context, request, &reply);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(reply.scores().data().empty());
  EXPECT_EQ(reply.scores().shape_size(), 4);
  EXPECT_EQ(reply.output().shm().offset(), k.size() + scores_bytes);
  EXPECT_EQ(std::string(region->data() + k.size(), scores_bytes), by_bytes.scores().data());
  EXPECT_EQ(std::string(region->data() + k.size() + scores_bytes, output_bytes),
            by_bytes.output().data());
  // An output over the input k is refused.
  *request.mutable_scores_out() = region->Ref(0, scores_bytes);
  grpc::ClientContext again;
  SetDeadline(&again);
  EXPECT_TRUE(GrpcStatusIs(stub_->AttentionScores(&again, request, &reply),
                           grpc::StatusCode::INVALID_ARGUMENT, "scores_out [0, "));
}

TEST_F(ShmServiceTest, AttentionResultsWriteIntoRegionsAsIntoTheReply) {
  // Every result beyond scores and output, once into the reply and once into
  // its reference (lse_out, top_k_indices_out, ...): the same bytes; the
  // reply then names each reference with the result's dtype and shape.
  const v1::RotateRequest rq = MakeRotateRequest(1, 5, 4, 16, 64, 0, 7);
  const v1::RotateRequest rk = MakeRotateRequest(1, 9, 2, 16, 64, 0, 8);
  v1::AttentionScoresRequest request;
  *request.mutable_config() = rq.config();
  *request.mutable_q() = rq.q();
  *request.mutable_k() = rk.q();
  *request.mutable_v() = rk.q();
  request.set_q_start_pos(4);
  request.set_causal(true);
  for (auto result : {v1::OUTPUT, v1::LSE, v1::TOP_K, v1::KEY_MASS, v1::SCORE_ROWS}) {
    request.add_results(result);
  }
  request.set_top_k(3);
  request.set_score_rows_start(1);
  request.set_score_rows_count(2);
  v1::AttentionScoresResponse by_bytes;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    const grpc::Status status = stub_->AttentionScores(&context, request, &by_bytes);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  auto region = NewRegion("results", 16384);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  struct Out {
    v1::SharedMemoryRef* ref;
    const v1::Tensor* want;
    const v1::Tensor& (v1::AttentionScoresResponse::*got)() const;
  };
  const Out outs[] = {
      {request.mutable_output_out(), &by_bytes.output(), &v1::AttentionScoresResponse::output},
      {request.mutable_lse_out(), &by_bytes.lse(), &v1::AttentionScoresResponse::lse},
      {request.mutable_top_k_indices_out(), &by_bytes.top_k_indices(),
       &v1::AttentionScoresResponse::top_k_indices},
      {request.mutable_top_k_probs_out(), &by_bytes.top_k_probs(),
       &v1::AttentionScoresResponse::top_k_probs},
      {request.mutable_key_mass_out(), &by_bytes.key_mass(),
       &v1::AttentionScoresResponse::key_mass},
      {request.mutable_score_rows_out(), &by_bytes.score_rows(),
       &v1::AttentionScoresResponse::score_rows},
  };
  size_t offset = 0;
  for (const Out& o : outs) {
    ASSERT_FALSE(o.want->data().empty());
    *o.ref = region->Ref(offset, o.want->data().size());
    offset += (o.want->data().size() + 63) / 64 * 64;
  }
  ASSERT_LE(offset, 16384u);
  v1::AttentionScoresResponse reply;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    const grpc::Status status = stub_->AttentionScores(&context, request, &reply);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_FALSE(reply.has_scores());
  for (const Out& o : outs) {
    const v1::Tensor& got = (reply.*o.got)();
    EXPECT_TRUE(got.data().empty());
    EXPECT_EQ(got.dtype(), o.want->dtype());
    EXPECT_EQ(std::vector<int64_t>(got.shape().begin(), got.shape().end()),
              std::vector<int64_t>(o.want->shape().begin(), o.want->shape().end()));
    EXPECT_EQ(got.shm().offset(), o.ref->offset());
    EXPECT_EQ(std::string(region->data() + o.ref->offset(), o.want->data().size()),
              o.want->data());
  }
  EXPECT_EQ(reply.top_k_indices().dtype(), v1::INT32);
  // A reference of the wrong size is refused, naming it and the result's size.
  request.mutable_lse_out()->set_byte_size(request.lse_out().byte_size() + 4);
  grpc::ClientContext again;
  SetDeadline(&again);
  EXPECT_TRUE(GrpcStatusIs(stub_->AttentionScores(&again, request, &reply),
                           grpc::StatusCode::INVALID_ARGUMENT, "lse_out.byte_size is 84"));
}

TEST_F(ShmServiceTest, DrainReleasesEveryRegion) {
  auto region = NewRegion("drained", 4096);
  ASSERT_TRUE(Register(stub_.get(), *region).ok());
  EXPECT_EQ(server_->shm().regions(), 1);
  server_->Drain(absl::ZeroDuration());
  EXPECT_EQ(server_->shm().regions(), 0);
  EXPECT_EQ(server_->shm().mapped_bytes(), 0);
}

// The SIGBUS guard: a region whose object shrinks under a call is read as
// zeros instead of killing the process, and answers FAILED_PRECONDITION.
TEST(ShmRegistryTest, ShrinkDuringUseIsCaughtNotFatal) {
  auto region = NewRegion("guarded", 3 * 4096);
  ShmRegistry registry(ShmLimits{});
  ASSERT_TRUE(registry.Register("me", "g", region->key(), 0, 3 * 4096).ok());
  absl::StatusOr<std::shared_ptr<const MappedRegion>> lease = registry.Find("me", "g", "q.shm");
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE((*lease)->Check().ok());
  ASSERT_EQ(ftruncate(region->fd(), 4096), 0);
  volatile char* bytes = (*lease)->data();
  bytes[2 * 4096 + 7] = 1;  // past the new end: SIGBUS without the guard
  EXPECT_EQ(bytes[2 * 4096 + 7], 1);
  EXPECT_TRUE((*lease)->Faulted());
  EXPECT_TRUE(StatusIs((*lease)->Check(), absl::StatusCode::kFailedPrecondition,
                       "shrank while a call used it"));
  // Unregistered while leased: the lease still reads its mapping.
  ASSERT_TRUE(registry.Unregister("me", "g").ok());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_TRUE(StatusIs(registry.Find("me", "g", "q.shm").status(), absl::StatusCode::kNotFound,
                       "q.shm.region \"g\""));
}

TEST(ShmRegistryTest, IdleOwnersLoseTheirRegionsOthersKeepTheirs) {
  auto idle = SharedRegion::Create("idle", 4096).value();
  auto busy = SharedRegion::Create("busy", 4096).value();
  ShmLimits limits;
  limits.owner_idle_lease = absl::Milliseconds(200);
  ShmRegistry registry(limits);
  ASSERT_TRUE(registry.Register("idle-owner", "r", idle->key(), 0, 4096).ok());
  ASSERT_TRUE(registry.Register("busy-owner", "r", busy->key(), 0, 4096).ok());
  for (int i = 0; i < 6; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(registry.Find("busy-owner", "r", "q.shm").ok());  // a use renews the lease
  }
  EXPECT_TRUE(StatusIs(registry.Find("idle-owner", "r", "q.shm").status(),
                       absl::StatusCode::kNotFound, "is not registered by this client"));
  EXPECT_EQ(registry.regions(), 1);
  EXPECT_EQ(registry.mapped_bytes(), 4096);
}

TEST(ShmRegistryTest, FileKeyRefusalsAllLookAlike) {
  char dir_template[] = "/tmp/rope-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  ASSERT_EQ(symlink("/etc/passwd", (dir + "/link").c_str()), 0);
  ASSERT_EQ(mkdir((dir + "/sub").c_str(), 0700), 0);
  ShmLimits limits;
  limits.allowed_dir = dir;
  ShmRegistry registry(limits);
  // Missing, a symlink out, a directory, outside: one code, one message
  // shape, nothing about what is there (no resolved path, no errno).
  for (const std::string& key : {dir + "/missing", dir + "/link", dir + "/sub",
                                 std::string("/etc/passwd"), dir + "/../../etc/shadow"}) {
    const absl::Status status = registry.Register("me", "f", key, 0, 1);
    EXPECT_TRUE(StatusIs(status, absl::StatusCode::kPermissionDenied,
                         absl::StrCat("key \"", key, "\" is not a regular file under "
                                      "--shm_allowed_dir \"", dir, "\" that the server may open")))
        << key;
    EXPECT_EQ(status.message().find("passwd\" ("), std::string::npos) << status;
  }
  unlink((dir + "/link").c_str());
  rmdir((dir + "/sub").c_str());
  rmdir(dir.c_str());
}

TEST(ShmRegistryTest, FileKeysMustLieUnderTheAllowedDirectory) {
  char dir_template[] = "/tmp/rope-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string file = dir + "/tensor.bin";
  const int fd = open(file.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix_fallocate(fd, 0, 8192), 0);
  close(fd);
  ShmLimits limits;
  limits.allowed_dir = dir;
  ShmRegistry registry(limits);
  EXPECT_TRUE(registry.Register("me", "f", file, 4096, 4096).ok());
  EXPECT_TRUE(StatusIs(registry.Register("me", "g", dir + "/../" + dir.substr(5) + "/../../etc/passwd", 0, 1),
                       absl::StatusCode::kPermissionDenied,
                       "is not a regular file under --shm_allowed_dir"));
  ShmLimits off;
  off.max_mapped_bytes = 0;
  ShmRegistry disabled(off);
  EXPECT_TRUE(StatusIs(disabled.Register("me", "f", file, 0, 1),
                       absl::StatusCode::kFailedPrecondition, "--shm_max_mapped_bytes=0"));
  registry.Clear();
  unlink(file.c_str());
  rmdir(dir.c_str());
}

// The Unix socket: served beside TCP, with the mode asked for, and shared
// memory works over it.
class UnixSocketTest : public ServiceTest {
 protected:
  void SetUp() override {
    socket_path_ = absl::StrCat("/tmp/rope-test-", getpid(), ".sock");
    ServerOptions options = DefaultOptions();
    options.unix_socket_paths = {socket_path_};
    options.unix_socket_mode = 0600;
    StartServer(options);
  }
  std::string socket_path_;
};

TEST_F(UnixSocketTest, ServesRotateAndSharedMemoryWithTheSocketMode) {
  struct stat st = {};
  ASSERT_EQ(stat(socket_path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto stub = v1::RopeService::NewStub(grpc::CreateChannel(
      absl::StrCat("unix://", socket_path_), grpc::InsecureChannelCredentials()));
  v1::RotateRequest request = MakeRotateRequest(1, 8, 2, 16);
  v1::RotateResponse by_tcp;
  v1::RotateResponse by_unix;
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub_->Rotate(&context, request, &by_tcp).ok());
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    ASSERT_TRUE(stub->Rotate(&context, request, &by_unix).ok());
  }
  EXPECT_EQ(by_tcp.q().data(), by_unix.q().data());
  auto region = NewRegion("unix", 4096);
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::RegisterSharedMemoryResponse registered;
  EXPECT_TRUE(stub->RegisterSharedMemory(&context, region->RegisterRequest(), &registered).ok());
}

TEST(UnixSocketOptionsTest, RelativeSocketPathIsInvalid) {
  ServerOptions options;
  options.listen_address = "";
  options.unix_socket_paths = {"relative.sock"};
  absl::StatusOr<std::unique_ptr<RopeServer>> server =
      RopeServer::Start(std::make_unique<Engine>(nullptr, EngineLimits()), options);
  EXPECT_TRUE(StatusIs(server.status(), absl::StatusCode::kInvalidArgument,
                       "Unix socket path is \"relative.sock\""));
}

}  // namespace
}  // namespace test
}  // namespace rope
