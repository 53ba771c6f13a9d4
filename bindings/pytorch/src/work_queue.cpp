#include "work_queue.hpp"

#include <ATen/core/ivalue.h>

namespace weft_torch {

WeftWork::WeftWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   std::function<void()> body, std::shared_ptr<WorkQueue> queue)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      body_(std::move(body)),
      queue_(std::move(queue)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

bool WeftWork::wait(std::chrono::milliseconds timeout) {
  if (!isCompleted()) queue_->runIfNext(this);
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> WeftWork::getFuture() { return future_; }

std::vector<at::Tensor> WeftWork::result() { return outputs_; }

void WeftWork::execute() {
  std::exception_ptr error;
  try {
    body_();
  } catch (...) {
    error = std::current_exception();
  }
  body_ = nullptr;  // drop the tensors it captured now, not when the last handle goes
  // The future first: once wait() returns, get_future().value() must be there too.
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
  finish(error);
}

WorkQueue::WorkQueue() : worker_([this] { loop(); }) {}

WorkQueue::~WorkQueue() { stop(); }

void WorkQueue::stop() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!worker_.joinable()) return;
  stopping_ = true;
  if (std::this_thread::get_id() == worker_.get_id()) {
    // The group is going away from inside one of its works (a future callback dropped the
    // last reference): this thread is the worker, so it runs what is left itself and lets
    // the loop end on its own once that work returns.
    while (!pending_.empty()) {
      c10::intrusive_ptr<WeftWork> next = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      next->execute();
      lock.lock();
    }
    worker_.detach();
    return;
  }
  lock.unlock();
  cv_.notify_all();
  worker_.join();
}

void WorkQueue::push(c10::intrusive_ptr<WeftWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(work));
  }
  cv_.notify_one();
}

bool WorkQueue::runIfNext(WeftWork *work) {
  c10::intrusive_ptr<WeftWork> next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ || pending_.empty() || pending_.front().get() != work) return false;
    next = std::move(pending_.front());
    pending_.pop_front();
    running_ = true;
  }
  next->execute();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  cv_.notify_all();
  return true;
}

void WorkQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return (!running_ && !pending_.empty()) || (stopping_ && !running_); });
    if (pending_.empty()) return;  // stopping, and everything queued has run
    // A blocking call's caller is about to wait() and run the work itself (runIfNext): let it,
    // rather than race it for the core and hand the result back through two wake-ups.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
    if (running_ || pending_.empty()) continue;
    c10::intrusive_ptr<WeftWork> next = std::move(pending_.front());
    pending_.pop_front();
    running_ = true;
    lock.unlock();
    next->execute();
    next.reset();
    lock.lock();
    running_ = false;
  }
}

}  // namespace weft_torch
