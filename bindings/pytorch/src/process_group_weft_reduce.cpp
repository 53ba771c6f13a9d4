// The reductions of ProcessGroupWeft (AllReduce, its coalesced form, Reduce, ReduceScatter)
// and the mapping of torch's ReduceOp to weft's. Each checks its arguments on the caller's
// thread (a mistake raises at the call) and queues a body that runs on the worker: it makes
// contiguous stand-ins, calls weft, and copies results back into non-contiguous outputs.
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "process_group_weft.hpp"
#include "tensor_util.hpp"

namespace weft_torch {

namespace {

// The weft op for a torch ReduceOp on tensors of like's dtype. PREMUL_SUM makes a weft
// PreMulSum op with the factor in like's dtype, destroyed with this object.
class RedOp {
 public:
  RedOp(const c10d::ReduceOp &op, const at::Tensor &like, weftComm_t comm) : comm_(comm) {
    bool isBool = like.scalar_type() == at::kBool;
    switch (op.op_) {
      // bool as uint8: "or" is max and "and" is min, so a result stays 0 or 1.
      case c10d::ReduceOp::SUM: op_ = isBool ? weftMax : weftSum; return;
      case c10d::ReduceOp::PRODUCT: op_ = isBool ? weftMin : weftProd; return;
      case c10d::ReduceOp::MIN: op_ = weftMin; return;
      case c10d::ReduceOp::MAX: op_ = weftMax; return;
      case c10d::ReduceOp::AVG:
        if (isBool) throw std::runtime_error("weft: ReduceOp.AVG is not defined for bool");
        op_ = weftAvg;
        return;
      case c10d::ReduceOp::PREMUL_SUM:
        if (isBool) throw std::runtime_error("weft: ReduceOp.PREMUL_SUM is not defined for bool");
        makePreMulSum(op, like);
        return;
      default:
        throw std::runtime_error("weft: ReduceOp " + std::to_string(int(op.op_)) +
                                 " (BAND, BOR, BXOR) has no weft equivalent");
    }
  }
  ~RedOp() {
    if (made_) weftRedOpDestroy(op_, comm_);
  }
  RedOp(const RedOp &) = delete;
  RedOp &operator=(const RedOp &) = delete;
  weftRedOp_t get() const { return op_; }

 private:
  void makePreMulSum(const c10d::ReduceOp &op, const at::Tensor &like) {
    auto *supp = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(op.supplement_.get());
    if (!supp) throw std::runtime_error("weft: PREMUL_SUM without a factor");
    // The factor as one element of the tensors' dtype: weft multiplies in that type.
    at::Tensor factor = supp->tensor_factors.empty()
                            ? at::scalar_tensor(supp->double_factor, like.options())
                            : supp->tensor_factors[0].to(like.options()).reshape({-1})[0].clone();
    weftResult_t r = weftRedOpCreatePreMulSum(&op_, factor.data_ptr(), weftTypeOf(like),
                                              weftScalarHostImmediate, comm_);
    if (r != weftSuccess)
      throw std::runtime_error(std::string("weft: weftRedOpCreatePreMulSum failed: ") +
                               weftGetErrorString(r) + ": " + weftGetLastError(comm_));
    made_ = true;
  }

  weftComm_t comm_;
  weftRedOp_t op_ = weftSum;
  bool made_ = false;
};

}  // namespace

void ProcessGroupWeft::runAllreduce(at::Tensor &flat, const c10d::ReduceOp &op) {
  RedOp rop(op, flat, comm_);
  void *p = flat.data_ptr();
  check(weftAllReduce(p, p, countOf(flat), weftTypeOf(flat), rop.get(), comm_, nullptr),
        "allreduce");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allreduce(std::vector<at::Tensor> &tensors,
                                                           const c10d::AllreduceOptions &opts) {
  at::Tensor t = single(tensors, "allreduce");
  c10d::ReduceOp op = opts.reduceOp;
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, t, op] {
    Dense d(t);
    runAllreduce(d.buf, op);
    d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allreduce_coalesced(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) {
  if (tensors.empty()) throw std::runtime_error("weft allreduce_coalesced: no tensors");
  for (const auto &t : tensors) {
    weftTypeOf(t);
    if (t.scalar_type() != tensors[0].scalar_type())
      throw std::runtime_error("weft allreduce_coalesced: tensors of different dtypes");
  }
  c10d::ReduceOp op = opts.reduceOp;
  std::vector<at::Tensor> ts = tensors;
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, ts, op] {
    at::Tensor flat = flatCat(ts);  // one call for all of them
    runAllreduce(flat, op);
    unflatten(flat, 0, ts);
  });
}
c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::reduce(std::vector<at::Tensor> &tensors,
                                                        const c10d::ReduceOptions &opts) {
  at::Tensor t = single(tensors, "reduce");
  checkRoot(opts.rootRank, getSize(), "reduce");
  int root = static_cast<int>(opts.rootRank);
  c10d::ReduceOp op = opts.reduceOp;
  return enqueue(c10d::OpType::REDUCE, tensors, [this, t, root, op] {
    Dense d(t);
    RedOp rop(op, t, comm_);
    void *p = d.buf.data_ptr();
    check(weftReduce(p, p, countOf(t), weftTypeOf(t), rop.get(), root, comm_, nullptr),
          "reduce");
    if (getRank() == root) d.copyBack();
  });
}
c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::reduce_scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts) {
  at::Tensor out = single(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize()))
    throw std::runtime_error("weft reduce_scatter: expects one list of " +
                             std::to_string(getSize()) + " input tensors");
  std::vector<at::Tensor> ins = inputs[0];
  checkSameShape(ins, out, "reduce_scatter");
  c10d::ReduceOp op = opts.reduceOp;
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, [this, out, ins, op] {
    at::Tensor flat = flatCat(ins);
    Dense d(out);
    RedOp rop(op, out, comm_);
    check(weftReduceScatter(flat.data_ptr(), d.buf.data_ptr(), countOf(out), weftTypeOf(out),
                            rop.get(), comm_, nullptr),
          "reduce_scatter");
    d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) {
  weftTypeOf(output);
  if (output.scalar_type() != input.scalar_type())
    throw std::runtime_error("weft _reduce_scatter_base: output and input dtypes differ");
  checkCount(countOf(input), countOf(output) * getSize(), "_reduce_scatter_base", "the input");
  at::Tensor out = output, in = input;
  c10d::ReduceOp op = opts.reduceOp;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [this, out, in, op] {
    at::Tensor src = in.contiguous();
    Dense d(out);
    RedOp rop(op, out, comm_);
    check(weftReduceScatter(src.data_ptr(), d.buf.data_ptr(), countOf(out), weftTypeOf(out),
                            rop.get(), comm_, nullptr),
          "_reduce_scatter_base");
    d.copyBack();
  });
}

}  // namespace weft_torch
