// Shared memory (RegisterSharedMemory and tensors by reference) and the Unix
// socket listener, against a real in-process server and real POSIX
// shared-memory objects.
#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
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
#include "grpcpp/create_channel_posix.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "core/proto_engine/shm_calls.h"
#include "core/proto_engine/shm_registry.h"
#include "core/proto_engine/tensor_resolver.h"
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
    options.shm.max_mapped_bytes_per_client = 3 << 20;
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

// A sparse object (sized, never written: perf_analyzer's output regions)
// registers with the region's pages allocated then, after they are charged:
// the server's touches allocate nothing later, and its memory grows by what
// the region is charged. Over the budget it is refused before anything is
// allocated.
TEST_F(ShmServiceTest, SparseObjectsAreAllocatedAtRegistrationWithinTheirCharge) {
  const std::string key = absl::StrCat("/rope-sparse-test-", getpid());
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 << 20), 0);
  struct stat st = {};
  ASSERT_EQ(fstat(fd, &st), 0);
  ASSERT_EQ(st.st_blocks, 0);
  // 4 MiB: over this client's 3 MiB of pages; nothing allocated.
  v1::RegisterSharedMemoryRequest request;
  request.set_name("sparse");
  request.set_key(key);
  request.set_byte_size(4 << 20);
  EXPECT_TRUE(GrpcStatusIs(Register(request), grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "--shm_max_mapped_bytes_per_client 3145728"));
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_blocks, 0);
  // 1 MiB at offset 1 MiB: those pages are allocated, no others.
  request.set_offset(1 << 20);
  request.set_byte_size(1 << 20);
  ASSERT_TRUE(Register(request).ok());
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_blocks * 512, 1 << 20);
  EXPECT_EQ(server_->shm().mapped_bytes(), 1 << 20);
  // A hole punched later: the next use allocates it again, within the same
  // charge, and the call is answered.
  ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 16), 0);
  v1::RotateRequest by_bytes;
  std::string expected;
  MakeQ(&by_bytes, &expected);
  v1::RotateRequest by_reference = by_bytes;
  by_reference.mutable_q()->clear_data();
  by_reference.mutable_q()->mutable_shm()->set_region("sparse");
  by_reference.mutable_q()->mutable_shm()->set_byte_size(by_bytes.q().data().size());
  void* object = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 1 << 20);
  ASSERT_NE(object, MAP_FAILED);
  std::memcpy(object, by_bytes.q().data().data(), by_bytes.q().data().size());
  v1::RotateResponse reply;
  ASSERT_TRUE(Rotate(by_reference, &reply).ok());
  EXPECT_EQ(std::string(static_cast<char*>(object), expected.size()), expected);
  munmap(object, 1 << 20);
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

// A region is charged the whole pages its range lies in: a few bytes
// straddling a page boundary cost two pages, and one client's pages are
// bounded on their own (--shm_max_mapped_bytes_per_client, 3 MiB here).
TEST_F(ShmServiceTest, RegionsAreChargedByTheirPagesPerClient) {
  auto object = NewRegion("paged", (3 << 20) + 4096);
  auto register_range = [&](v1::RopeService::Stub* stub, const std::string& name,
                            uint64_t offset, uint64_t byte_size) {
    v1::RegisterSharedMemoryRequest request;
    request.set_name(name);
    request.set_key(object->key());
    request.set_offset(offset);
    request.set_byte_size(byte_size);
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RegisterSharedMemoryResponse reply;
    return stub->RegisterSharedMemory(&context, request, &reply);
  };
  auto mapped = [&]() {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::ServerInfo info;
    EXPECT_TRUE(stub_->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.limits().shm_max_mapped_bytes_per_client(), 3 << 20);
    return info.shm_mapped_bytes();
  };
  ASSERT_TRUE(register_range(stub_.get(), "head", 0, 1 << 20).ok());
  EXPECT_EQ(mapped(), 1 << 20);
  // 2 bytes across the boundary at 1 MiB + 4096: two pages.
  ASSERT_TRUE(register_range(stub_.get(), "straddle", (1 << 20) + 4095, 2).ok());
  EXPECT_EQ(mapped(), (1 << 20) + 8192);
  // 2 MiB - 8192 bytes more fit 3 MiB as bytes, not as pages when unaligned.
  const uint64_t rest = (2 << 20) - 8192;
  EXPECT_TRUE(GrpcStatusIs(register_range(stub_.get(), "rest", (1 << 20) + 8193, rest),
                           grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "region \"rest\" (offset 1056769, byte_size 2088960) maps 2093056 "
                           "bytes of pages, bringing this client's mapped bytes to 3149824: over "
                           "the server's --shm_max_mapped_bytes_per_client 3145728"));
  ASSERT_TRUE(register_range(stub_.get(), "rest", (1 << 20) + 8192, rest).ok());
  EXPECT_EQ(mapped(), 3 << 20);
  // This client is full; another has its own share of the server's total.
  auto other = OtherClient();
  ASSERT_TRUE(register_range(other.get(), "tail", 3 << 20, 1).ok());
  EXPECT_EQ(mapped(), (3 << 20) + 4096);
  // Unregistering returns the pages.
  ASSERT_TRUE(Unregister("straddle").ok());
  EXPECT_EQ(mapped(), (3 << 20) - 4096);
}

// One client registers each byte of an object once, whatever name it uses:
// the same pages N times over would take N times their share of the
// server-wide total. Another client may register the same bytes.
TEST_F(ShmServiceTest, OverlappingRegistrationsOfOneClientAreRefused) {
  auto object = NewRegion("twice", 3 * 4096);
  ASSERT_TRUE(Register(stub_.get(), *object).ok());
  v1::RegisterSharedMemoryRequest again = object->RegisterRequest();
  again.set_name("again");
  again.set_offset(4096);
  again.set_byte_size(100);
  EXPECT_TRUE(GrpcStatusIs(
      Register(again), grpc::StatusCode::ALREADY_EXISTS,
      absl::StrCat("region \"again\": bytes [4096, 4196) of key \"", object->key(),
                   "\" overlap bytes [0, 12288) of the same object that this client registered "
                   "as region \"", object->RegisterRequest().name(), "\"")));
  EXPECT_EQ(server_->shm().regions(), 1);
  EXPECT_EQ(server_->shm().mapped_bytes(), 3 * 4096);
  auto other = OtherClient();
  EXPECT_TRUE(Register(other.get(), *object).ok());
  // Adjacent, not overlapping: allowed.
  ASSERT_TRUE(Unregister(object->RegisterRequest().name()).ok());
  v1::RegisterSharedMemoryRequest first = again;
  first.set_name("first");
  first.set_offset(0);
  first.set_byte_size(4096);
  ASSERT_TRUE(Register(first).ok());
  v1::RegisterSharedMemoryRequest second = first;
  second.set_name("second");
  second.set_offset(4096);
  ASSERT_TRUE(Register(second).ok());
  second.set_name("third");
  second.set_offset(4095);
  second.set_byte_size(2);
  EXPECT_TRUE(GrpcStatusIs(Register(second), grpc::StatusCode::ALREADY_EXISTS,
                           "overlap bytes [0, 4096) of the same object"));
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
  limits.owner_idle_lease = absl::Seconds(1);
  ShmRegistry registry(limits);
  ASSERT_TRUE(registry.Register("idle-owner", "r", idle->key(), 0, 4096).ok());
  ASSERT_TRUE(registry.Register("busy-owner", "r", busy->key(), 0, 4096).ok());
  // The busy owner uses its region every 50 ms (a stall of this thread of
  // most of a lease is survived) until the idle owner's lease has passed
  // by half again, read off the clock rather than counted in sleeps.
  const absl::Time registered = absl::Now();
  while (absl::Now() - registered < limits.owner_idle_lease * 3 / 2) {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(registry.Find("busy-owner", "r", "q.shm").ok());  // a use renews the lease
  }
  EXPECT_TRUE(StatusIs(registry.Find("idle-owner", "r", "q.shm").status(),
                       absl::StatusCode::kNotFound, "is not registered by this client"));
  EXPECT_EQ(registry.regions(), 1);
  EXPECT_EQ(registry.mapped_bytes(), 4096);
}

// Two keys reaching one file (a hard link) are one object to the overlap
// check: it compares device and inode, not names.
TEST(ShmRegistryTest, AliasesThroughAnotherKeyAreTheSameObject) {
  char dir_template[] = "/tmp/rope-shm-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string file = dir + "/tensor.bin";
  const std::string link = dir + "/alias.bin";
  const int fd = open(file.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix_fallocate(fd, 0, 8192), 0);
  close(fd);
  ASSERT_EQ(::link(file.c_str(), link.c_str()), 0);
  ShmLimits limits;
  limits.allowed_dir = dir;
  ShmRegistry registry(limits);
  ASSERT_TRUE(registry.Register("me", "a", file, 0, 8192).ok());
  EXPECT_TRUE(StatusIs(registry.Register("me", "b", link, 4096, 4096),
                       absl::StatusCode::kAlreadyExists,
                       absl::StrCat("bytes [4096, 8192) of key \"", link,
                                    "\" overlap bytes [0, 8192) of the same object that this "
                                    "client registered as region \"a\" (key \"", file, "\")")));
  EXPECT_TRUE(registry.Register("you", "b", link, 4096, 4096).ok());
  EXPECT_EQ(registry.mapped_bytes(), 8192 + 4096);
  registry.Clear();
  unlink(link.c_str());
  unlink(file.c_str());
  rmdir(dir.c_str());
}

// A call that holds a region unregistered meanwhile and registered again
// under another name has two names for the same bytes: its output and input
// are compared as bytes of the object, not by region name.
TEST(ShmRegistryTest, AnOutputAliasingAnInputThroughAnotherRegionIsRefused) {
  auto object = NewRegion("alias", 8192);
  ShmRegistry registry(ShmLimits{});
  ASSERT_TRUE(registry.Register("me", "a", object->key(), 0, 8192).ok());
  CallerRegions regions{&registry, [] { return std::string("me"); }};
  TensorResolver resolver(regions);
  v1::Tensor q;
  q.set_dtype(v1::FLOAT32);
  q.mutable_shm()->set_region("a");
  q.mutable_shm()->set_offset(4096);
  q.mutable_shm()->set_byte_size(1024);
  TensorView q_view;
  ASSERT_TRUE(resolver.ResolveInput(q, "q", 0, &q_view).ok());
  ASSERT_TRUE(registry.Unregister("me", "a").ok());
  ASSERT_TRUE(registry.Register("me", "b", object->key(), 4096, 4096).ok());
  v1::SharedMemoryRef out;
  out.set_region("b");
  out.set_offset(512);
  out.set_byte_size(1024);
  TensorView out_view;
  ASSERT_TRUE(resolver.ResolveOutput(out, "k_out", 1, DType::kFloat32, 1024, "k is", &out_view)
                  .ok());
  EXPECT_TRUE(StatusIs(resolver.CheckCall(), absl::StatusCode::kInvalidArgument,
                       "k_out [512, 1536) of region \"b\" overlaps q.shm [4096, 5120) of region "
                       "\"a\": both are bytes [4608, 5632) and [4096, 5120) of one object"));
  // The same bytes exactly, as the input's own output: in place, allowed.
  TensorResolver in_place(regions);
  v1::Tensor q_by_b = q;
  q_by_b.mutable_shm()->set_region("b");
  q_by_b.mutable_shm()->set_offset(0);
  ASSERT_TRUE(in_place.ResolveInput(q_by_b, "q", 0, &q_view).ok());
  out.set_offset(0);
  ASSERT_TRUE(in_place.ResolveOutput(out, "q_out", 0, DType::kFloat32, 1024, "q is", &out_view)
                  .ok());
  EXPECT_TRUE(in_place.CheckCall().ok());
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

// Clients of the Unix socket are told apart by uid (SO_PEERCRED): two
// local users sharing one socket neither see nor unregister each other's
// regions, and each registers only objects it owns. The second user is
// "nobody" (65534): a child process drops to it, connects, and hands the
// connected socket back (the peer's credentials are those of the process
// that connected), so every call here runs in this process.
class UnixPeerTest : public ServiceTest {
 protected:
  static constexpr uid_t kNobody = 65534;

  void SetUp() override {
    socket_path_ = absl::StrCat("/tmp/rope-peer-test-", getpid(), ".sock");
    ServerOptions options = DefaultOptions();
    options.unix_socket_paths = {socket_path_};
    options.unix_socket_mode = 0666;
    StartServer(options);
  }

  std::unique_ptr<v1::RopeService::Stub> AsThisUser() const {
    return v1::RopeService::NewStub(grpc::CreateChannel(absl::StrCat("unix://", socket_path_),
                                                        grpc::InsecureChannelCredentials()));
  }

  // A stub over a connection that user `uid` opened; null when it failed.
  std::unique_ptr<v1::RopeService::Stub> AsUser(uid_t uid) const {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return nullptr;
    const pid_t child = fork();
    if (child == 0) {
      // Only async-signal-safe calls until _exit.
      sockaddr_un address = {};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path, socket_path_.c_str(), socket_path_.size());
      const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0 || fd < 0 ||
          connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        _exit(1);
      }
      char byte = 0;
      iovec data = {&byte, 1};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      msghdr message = {};
      message.msg_iov = &data;
      message.msg_iovlen = 1;
      message.msg_control = control;
      message.msg_controllen = sizeof(control);
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
      _exit(sendmsg(pair[1], &message, 0) == 1 ? 0 : 1);
    }
    close(pair[1]);
    int status = -1;
    if (child < 0 || waitpid(child, &status, 0) != child || status != 0) {
      close(pair[0]);
      return nullptr;
    }
    char byte = 0;
    iovec data = {&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr message = {};
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t got = recvmsg(pair[0], &message, MSG_DONTWAIT);
    close(pair[0]);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    if (got != 1 || header == nullptr || header->cmsg_type != SCM_RIGHTS) return nullptr;
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(header), sizeof(int));
    return v1::RopeService::NewStub(grpc::CreateInsecureChannelFromFd("unix-peer", fd));
  }

  static grpc::Status Register(v1::RopeService::Stub* stub,
                               const v1::RegisterSharedMemoryRequest& request) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RegisterSharedMemoryResponse reply;
    return stub->RegisterSharedMemory(&context, request, &reply);
  }
  static grpc::Status Unregister(v1::RopeService::Stub* stub, const std::string& name) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name);
    v1::UnregisterSharedMemoryResponse reply;
    return stub->UnregisterSharedMemory(&context, request, &reply);
  }
  static std::vector<std::string> Names(v1::RopeService::Stub* stub) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::SharedMemoryStatusResponse reply;
    std::vector<std::string> names;
    if (!stub->SharedMemoryStatus(&context, v1::SharedMemoryStatusRequest(), &reply).ok()) {
      return {"(status failed)"};
    }
    for (const auto& region : reply.regions()) names.push_back(region.name());
    return names;
  }
  std::string socket_path_;
};

TEST_F(UnixPeerTest, AUnixClientIsItsUidAndKeepsItsRegionsAcrossConnections) {
  auto region = NewRegion("own", 4096);
  ASSERT_TRUE(Register(AsThisUser().get(), region->RegisterRequest()).ok());
  // Another connection of the same user: the same owner.
  EXPECT_EQ(Names(AsThisUser().get()), std::vector<std::string>{region->RegisterRequest().name()});
  // A TCP client of the same host is another owner.
  EXPECT_TRUE(GrpcStatusIs(Unregister(stub_.get(), region->RegisterRequest().name()),
                           grpc::StatusCode::NOT_FOUND, "is not registered by this client"));
  EXPECT_EQ(server_->shm().regions(), 1);
}

TEST_F(UnixPeerTest, TwoUsersOnOneSocketAreTwoOwners) {
  if (geteuid() != 0) GTEST_SKIP() << "connecting as a second uid needs root";
  auto nobody = AsUser(kNobody);
  ASSERT_NE(nobody, nullptr);
  auto root = AsThisUser();
  auto theirs = NewRegion("theirs", 4096);
  ASSERT_EQ(fchown(theirs->fd(), kNobody, kNobody), 0);
  v1::RegisterSharedMemoryRequest request = theirs->RegisterRequest();
  request.set_name("shared-name");
  ASSERT_TRUE(Register(nobody.get(), request).ok());
  EXPECT_EQ(Names(nobody.get()), std::vector<std::string>{"shared-name"});
  // The other user on the same socket sees nothing, unregisters nothing,
  // references nothing, and its own region by the same name is its own.
  EXPECT_TRUE(Names(root.get()).empty());
  EXPECT_TRUE(GrpcStatusIs(Unregister(root.get(), "shared-name"), grpc::StatusCode::NOT_FOUND,
                           "region \"shared-name\" is not registered by this client"));
  v1::RotateRequest by_reference = MakeRotateRequest(1, 8, 2, 16);
  const size_t q_bytes = by_reference.q().data().size();
  by_reference.mutable_q()->clear_data();
  *by_reference.mutable_q()->mutable_shm() = theirs->Ref(0, q_bytes);
  by_reference.mutable_q()->mutable_shm()->set_region("shared-name");
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RotateResponse reply;
    EXPECT_TRUE(GrpcStatusIs(root->Rotate(&context, by_reference, &reply),
                             grpc::StatusCode::NOT_FOUND,
                             "q.shm.region \"shared-name\" is not registered by this client"));
  }
  {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::RotateResponse reply;
    EXPECT_TRUE(nobody->Rotate(&context, by_reference, &reply).ok());
  }
  // Each registers only objects it owns: nobody's object is not root's
  // (though root could open it), root's is not nobody's (the server could
  // open it, nobody could not).
  EXPECT_TRUE(GrpcStatusIs(Register(root.get(), request), grpc::StatusCode::PERMISSION_DENIED,
                           absl::StrCat("key \"", theirs->key(),
                                        "\" does not belong to this client (uid 0)")));
  auto roots = NewRegion("roots", 4096);
  v1::RegisterSharedMemoryRequest roots_request = roots->RegisterRequest();
  roots_request.set_name("roots");
  EXPECT_TRUE(GrpcStatusIs(Register(nobody.get(), roots_request),
                           grpc::StatusCode::PERMISSION_DENIED,
                           "does not belong to this client (uid 65534)"));
  ASSERT_TRUE(Register(root.get(), roots_request).ok());
  EXPECT_EQ(Names(root.get()), std::vector<std::string>{"roots"});
  // Another connection of nobody's: the same owner.
  auto nobody_again = AsUser(kNobody);
  ASSERT_NE(nobody_again, nullptr);
  EXPECT_EQ(Names(nobody_again.get()), std::vector<std::string>{"shared-name"});
  EXPECT_TRUE(Unregister(nobody_again.get(), "shared-name").ok());
  EXPECT_EQ(server_->shm().regions(), 1);
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
