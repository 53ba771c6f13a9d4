// The collectives of ProcessGroupWeft that move data without reducing it (Broadcast, the
// AllGathers, Gather, Scatter, AlltoAll, Send/Recv) and Barrier. As in the reductions, the
// arguments are checked on the caller's thread and the body runs on the worker.
#include "process_group_weft.hpp"
#include "tensor_util.hpp"

namespace weft_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::broadcast(std::vector<at::Tensor> &tensors,
                                                           const c10d::BroadcastOptions &opts) {
  at::Tensor t = single(tensors, "broadcast");
  checkRoot(opts.rootRank, getSize(), "broadcast");
  int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, tensors, [this, t, root] {
    Dense d(t);
    check(weftBcast(d.buf.data_ptr(), countOf(t), weftTypeOf(t), root, comm_, nullptr),
          "broadcast");
    d.copyBack();
  });
}
c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allgather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  at::Tensor in = single(inputs, "allgather");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize()))
    throw std::runtime_error("weft allgather: expects one list of " +
                             std::to_string(getSize()) + " output tensors");
  std::vector<at::Tensor> outs = outputs[0];
  checkSameShape(outs, in, "allgather");
  return enqueue(c10d::OpType::ALLGATHER, outs, [this, in, outs] {
    at::Tensor src = in.contiguous();
    at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
    check(weftAllGather(src.data_ptr(), flat.data_ptr(), countOf(in), weftTypeOf(in), comm_,
                        nullptr),
          "allgather");
    unflatten(flat, 0, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::_allgather_base(
    at::Tensor &output, at::Tensor &input, const c10d::AllgatherOptions &) {
  weftTypeOf(input);
  if (output.scalar_type() != input.scalar_type())
    throw std::runtime_error("weft _allgather_base: output and input dtypes differ");
  checkCount(countOf(output), countOf(input) * getSize(), "_allgather_base", "the output");
  at::Tensor out = output, in = input;
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, [this, out, in] {
    at::Tensor src = in.contiguous();
    Dense d(out);
    check(weftAllGather(src.data_ptr(), d.buf.data_ptr(), countOf(in), weftTypeOf(in), comm_,
                        nullptr),
          "_allgather_base");
    d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputLists, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &) {
  // outputLists[r][i] receives rank r's inputs[i].
  if (inputs.empty()) throw std::runtime_error("weft allgather_coalesced: no tensors");
  if (outputLists.size() != static_cast<size_t>(getSize()))
    throw std::runtime_error("weft allgather_coalesced: expects " + std::to_string(getSize()) +
                             " output lists, one per rank");
  for (const auto &t : inputs) {
    weftTypeOf(t);
    if (t.scalar_type() != inputs[0].scalar_type())
      throw std::runtime_error("weft allgather_coalesced: tensors of different dtypes");
  }
  std::vector<at::Tensor> allOuts;
  for (const auto &list : outputLists) {
    if (list.size() != inputs.size())
      throw std::runtime_error("weft allgather_coalesced: an output list has " +
                               std::to_string(list.size()) + " tensors, the input " +
                               std::to_string(inputs.size()));
    for (size_t i = 0; i < list.size(); i++)
      checkSameShape({list[i]}, inputs[i], "allgather_coalesced");
    allOuts.insert(allOuts.end(), list.begin(), list.end());
  }
  std::vector<at::Tensor> ins = inputs;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, allOuts, [this, ins, allOuts] {
    at::Tensor src = flatCat(ins);
    at::Tensor flat = at::empty({src.numel() * getSize()}, src.options());
    check(weftAllGather(src.data_ptr(), flat.data_ptr(), countOf(src), weftTypeOf(src), comm_,
                        nullptr),
          "allgather_coalesced");
    unflatten(flat, 0, allOuts);  // rank-major, as allOuts is
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::gather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::GatherOptions &opts) {
  at::Tensor in = single(inputs, "gather");
  checkRoot(opts.rootRank, getSize(), "gather");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (getRank() == root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<size_t>(getSize()))
      throw std::runtime_error("weft gather: the root expects one list of " +
                               std::to_string(getSize()) + " output tensors");
    outs = outputs[0];
    checkSameShape(outs, in, "gather");
  }
  return enqueue(c10d::OpType::GATHER, outs, [this, in, outs, root] {
    at::Tensor src = in.contiguous();
    at::Tensor flat;
    if (getRank() == root) flat = at::empty({in.numel() * getSize()}, in.options());
    check(weftGather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, countOf(in),
                     weftTypeOf(in), root, comm_, nullptr),
          "gather");
    if (flat.defined()) unflatten(flat, 0, outs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ScatterOptions &opts) {
  at::Tensor out = single(outputs, "scatter");
  checkRoot(opts.rootRank, getSize(), "scatter");
  int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (getRank() == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<size_t>(getSize()))
      throw std::runtime_error("weft scatter: the root expects one list of " +
                               std::to_string(getSize()) + " input tensors");
    ins = inputs[0];
    checkSameShape(ins, out, "scatter");
  }
  return enqueue(c10d::OpType::SCATTER, outputs, [this, out, ins, root] {
    at::Tensor flat;
    if (!ins.empty()) flat = flatCat(ins);
    Dense d(out);
    check(weftScatter(flat.defined() ? flat.data_ptr() : nullptr, d.buf.data_ptr(), countOf(out),
                      weftTypeOf(out), root, comm_, nullptr),
          "scatter");
    d.copyBack();
  });
}
void ProcessGroupWeft::runAlltoallv(const std::vector<at::Tensor> &sends,
                                    const std::vector<at::Tensor> &recvs) {
  // One group: every pair's send and receive run together, whatever the order.
  check(weftGroupStart(), "alltoall (group start)");
  weftResult_t queued = weftSuccess;
  for (int p = 0; p < getSize(); p++) {
    const at::Tensor &s = sends[p], &r = recvs[p];
    weftResult_t rs = weftSuccess, rr = weftSuccess;
    if (s.numel()) rs = weftSend(s.data_ptr(), countOf(s), weftTypeOf(s), p, comm_, nullptr);
    if (r.numel()) rr = weftRecv(r.data_ptr(), countOf(r), weftTypeOf(r), p, comm_, nullptr);
    if (queued == weftSuccess) queued = rs != weftSuccess ? rs : rr;
  }
  weftResult_t ended = weftGroupEnd();
  check(queued != weftSuccess ? queued : ended, "alltoall");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &outputSplits,
    std::vector<int64_t> &inputSplits, const c10d::AllToAllOptions &) {
  weftTypeOf(input);
  if (output.scalar_type() != input.scalar_type())
    throw std::runtime_error("weft alltoall_base: output and input dtypes differ");
  const int n = getSize();
  at::Tensor out = output, in = input;
  if (outputSplits.empty() && inputSplits.empty()) {
    if (in.numel() % n || out.numel() != in.numel())
      throw std::runtime_error("weft alltoall_base: equal splits need input and output of the "
                               "same size, a multiple of the group size");
    return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [this, out, in, n] {
      at::Tensor src = in.contiguous();
      Dense d(out);
      check(weftAlltoAll(src.data_ptr(), d.buf.data_ptr(), countOf(in) / n, weftTypeOf(in),
                         comm_, nullptr),
            "alltoall_base");
      d.copyBack();
    });
  }
  // Uneven splits: rows of dim 0 per rank; an empty list means equal rows.
  auto rowsPerRank = [n](const at::Tensor &t, const std::vector<int64_t> &splits,
                         const char *which) {
    if (t.dim() == 0) throw std::runtime_error("weft alltoall_base: a 0-d tensor has no rows");
    std::vector<int64_t> rows = splits;
    if (rows.empty()) {
      if (t.size(0) % n)
        throw std::runtime_error(std::string("weft alltoall_base: the ") + which +
                                 " rows do not split equally");
      rows.assign(n, t.size(0) / n);
    }
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    if (rows.size() != static_cast<size_t>(n) || total != t.size(0))
      throw std::runtime_error(std::string("weft alltoall_base: the ") + which +
                               " splits do not add up to its rows");
    return rows;
  };
  std::vector<int64_t> sendRows = rowsPerRank(in, inputSplits, "input");
  std::vector<int64_t> recvRows = rowsPerRank(out, outputSplits, "output");
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, [this, out, in, sendRows, recvRows] {
    at::Tensor src = in.contiguous();
    Dense d(out);
    std::vector<at::Tensor> sends, recvs;
    for (int64_t p = 0, so = 0, ro = 0; p < getSize(); p++) {
      sends.push_back(src.narrow(0, so, sendRows[p]));
      recvs.push_back(d.buf.narrow(0, ro, recvRows[p]));
      so += sendRows[p];
      ro += recvRows[p];
    }
    runAlltoallv(sends, recvs);
    d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::alltoall(std::vector<at::Tensor> &outputs,
                                                          std::vector<at::Tensor> &inputs,
                                                          const c10d::AllToAllOptions &) {
  const size_t n = static_cast<size_t>(getSize());
  if (outputs.size() != n || inputs.size() != n)
    throw std::runtime_error("weft alltoall: expects " + std::to_string(n) +
                             " input and output tensors");
  for (size_t p = 0; p < n; p++) {
    weftTypeOf(inputs[p]);
    weftTypeOf(outputs[p]);
    if (inputs[p].scalar_type() != inputs[0].scalar_type() ||
        outputs[p].scalar_type() != inputs[0].scalar_type())
      throw std::runtime_error("weft alltoall: tensors of different dtypes");
  }
  std::vector<at::Tensor> outs = outputs, ins = inputs;
  return enqueue(c10d::OpType::ALLTOALL, outputs, [this, outs, ins] {
    std::vector<at::Tensor> sends;
    std::vector<Dense> recvs;
    std::vector<at::Tensor> recvBufs;
    for (size_t p = 0; p < ins.size(); p++) {
      sends.push_back(ins[p].contiguous());
      recvs.emplace_back(outs[p]);
      recvBufs.push_back(recvs.back().buf);
    }
    runAlltoallv(sends, recvBufs);
    for (auto &d : recvs) d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::send(std::vector<at::Tensor> &tensors,
                                                      int dstRank, int) {
  at::Tensor t = single(tensors, "send");
  checkRoot(dstRank, getSize(), "send");
  return enqueue(c10d::OpType::SEND, tensors, [this, t, dstRank] {
    at::Tensor src = t.contiguous();
    check(weftSend(src.data_ptr(), countOf(t), weftTypeOf(t), dstRank, comm_, nullptr), "send");
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::recv(std::vector<at::Tensor> &tensors,
                                                      int srcRank, int) {
  at::Tensor t = single(tensors, "recv");
  checkRoot(srcRank, getSize(), "recv");
  return enqueue(c10d::OpType::RECV, tensors, [this, t, srcRank] {
    Dense d(t);
    check(weftRecv(d.buf.data_ptr(), countOf(t), weftTypeOf(t), srcRank, comm_, nullptr),
          "recv");
    d.copyBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::barrier(const c10d::BarrierOptions &) {
  // A one-byte AllReduce: it returns on a rank once every rank has entered it.
  return enqueue(c10d::OpType::BARRIER, {}, [this] {
    void *p = barrierBuf_.data_ptr();
    check(weftAllReduce(p, p, 1, weftUint8, weftMax, comm_, nullptr), "barrier");
  });
}

}  // namespace weft_torch
