// The worker of one process group: runs its collectives one at a time, in the order they were
// called, so that async_op=True returns at once. A weft communicator is driven by one thread at
// a time; the queue guarantees that, whether the worker or a waiting caller runs the work.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace weft_torch {

class WorkQueue;

// One queued collective. Completes the c10d Work (wait()) and its future (DDP's getFuture())
// together, with the outputs or with the exception the body threw.
class WeftWork : public c10d::Work {
 public:
  WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
           std::function<void()> body, std::shared_ptr<WorkQueue> queue);

  // A work nobody has started yet is run by the waiting thread itself (when it is the next
  // one due): a blocking call then costs no hand-off to the worker and back.
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;

  // Runs the body once, then completes the work and its future.
  void execute();

 private:
  std::vector<at::Tensor> outputs_;
  std::function<void()> body_;
  std::shared_ptr<WorkQueue> queue_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class WorkQueue {
 public:
  WorkQueue();
  ~WorkQueue();  // stop()
  // Runs what is still queued, then ends the worker. Works may outlive the queue's owner
  // (they hold it), so the owner calls this before it frees what the works use.
  void stop();

  void push(c10::intrusive_ptr<WeftWork> work);
  // Runs work on this thread if it is the next due and nothing else runs; false otherwise.
  bool runIfNext(WeftWork *work);

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WeftWork>> pending_;
  bool running_ = false;  // a work of this queue is executing (on the worker or a waiter)
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace weft_torch
