// The process group's life: the communicator made through the c10d store, the worker, errors.
#include "process_group_weft.hpp"

#include <Python.h>

#include <climits>
#include <cstring>

#include "tensor_util.hpp"

namespace weft_torch {

namespace {
// The key under which rank 0 publishes the unique id. torch gives every process group its
// own PrefixStore, so one key per group is enough.
const char *const kUniqueIdKey = "weft_unique_id";

std::string resultText(weftResult_t r, weftComm_t comm) {
  return std::string(weftGetErrorString(r)) + ": " + weftGetLastError(comm);
}
}  // namespace

ProcessGroupWeft::ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
  weftUniqueId id;
  if (rank == 0) {
    weftResult_t r = weftGetUniqueId(&id);
    if (r != weftSuccess)
      throw std::runtime_error("weft: weftGetUniqueId failed: " + resultText(r, nullptr));
    const auto *bytes = reinterpret_cast<const uint8_t *>(&id);
    store->set(kUniqueIdKey, std::vector<uint8_t>(bytes, bytes + sizeof id));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    if (bytes.size() != sizeof id)
      throw std::runtime_error("weft: the unique id in the store has " +
                               std::to_string(bytes.size()) + " bytes, not " +
                               std::to_string(sizeof id));
    std::memcpy(&id, bytes.data(), sizeof id);
  }
  // Every wait of the communicator gives up at the process group's timeout, so a stuck peer
  // raises there instead of hanging.
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  long long ms = timeout.count();
  config.timeoutMs = static_cast<int>(ms < 1 ? 1 : (ms > INT_MAX ? INT_MAX : ms));
  weftResult_t r = weftCommInitRankConfig(&comm_, size, id, rank, &config);
  if (r != weftSuccess)
    throw std::runtime_error("weft: rank " + std::to_string(rank) +
                             ": weftCommInitRankConfig failed: " + resultText(r, nullptr));
  barrierBuf_ = at::zeros({1}, at::kByte);
  queue_ = std::make_shared<WorkQueue>();
}

ProcessGroupWeft::~ProcessGroupWeft() {
  // Runs what is queued and joins the worker. Python drops the last reference with the GIL
  // held, and the worker may need it (freeing a tensor that has a Python object): let go of
  // it while joining.
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState *saved = PyEval_SaveThread();
    queue_->stop();
    PyEval_RestoreThread(saved);
  } else {
    queue_->stop();
  }
  queue_.reset();
  // A broken communicator's peers may be gone: abort does not talk to them.
  if (broken_)
    weftCommAbort(comm_);
  else
    weftCommDestroy(comm_);
}

void ProcessGroupWeft::check(weftResult_t r, const char *what) {
  if (r == weftSuccess) return;
  std::string msg = std::string("weft ") + what + " failed on rank " +
                    std::to_string(getRank()) + ": " + resultText(r, comm_);
  // A refused argument leaves the communicator usable; anything else (a dead peer, a
  // timeout) does not.
  bool fatal = r != weftInvalidArgument && r != weftInvalidUsage;
  if (fatal && !broken_) {
    brokenMessage_ = msg;
    broken_ = true;
  }
  throw std::runtime_error(msg);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::enqueue(c10d::OpType type,
                                                         std::vector<at::Tensor> outputs,
                                                         std::function<void()> body) {
  auto guarded = [this, body = std::move(body)] {
    if (broken_)
      throw std::runtime_error("weft: the communicator failed earlier and runs nothing more (" +
                               brokenMessage_ + ")");
    body();
  };
  auto work = c10::make_intrusive<WeftWork>(getRank(), type, std::move(outputs),
                                            std::move(guarded), queue_);
  queue_->push(work);
  return work;
}

c10::intrusive_ptr<c10d::ProcessGroup> createProcessGroupWeft(
    const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupWeft>(store, rank, size, timeout);
}

}  // namespace weft_torch
