// Expression programs -> LLVM IR -> PTX -> cubin: the pointwise kernel and the row kernel.
#include "codegen/expr_lower.hpp"

#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Metadata.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "codegen/jitlink.hpp"
#include "codegen/nvptx_module.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {

namespace {

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;
constexpr int kWarp = 32;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 62;

[[noreturn]] void usage(std::string message) { throw Error(ErrorKind::usage, 0, std::move(message)); }

std::string describe(const LowerParams& p) {
  return "block=" + std::to_string(p.block) + " items=" + std::to_string(p.items) + " vector=" +
         std::to_string(p.vector) + " threads_per_row=" + std::to_string(p.threads_per_row);
}

// FNV-1a: the kernel's name only has to differ between different programs and params, and stay
// the same across builds and hosts; the compile key of a lowered kernel is computed elsewhere.
std::string name_of(const Program& program, const LowerParams& params) {
  const std::string text = to_canonical(program) + "\n" + describe(params);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("gmjit_expr_") + hex;
}

int storage_bytes(Dtype dtype) { return dtype == Dtype::f32 ? 4 : 2; }

class Lowering {
 public:
  Lowering(const Program& program, const LowerParams& params, llvm::Module& module)
      : program_(program),
        params_(params),
        module_(module),
        context_(module.getContext()),
        b_(module.getContext()),
        f32_(llvm::Type::getFloatTy(context_)),
        i64_(llvm::Type::getInt64Ty(context_)),
        scalar_(program.nodes().size(), nullptr),
        row_(program.nodes().size(), nullptr),
        reciprocal_(program.nodes().size(), nullptr) {}

  void build(const std::string& name) {
    declare_kernel(name);
    compute_scalars();
    if (program_.has_reduction()) {
      build_row_kernel();
    } else {
      build_pointwise_kernel();
    }
    b_.CreateRetVoid();
  }

 private:
  // One chunk: `vector` consecutive elements of one row, loaded and stored together.
  struct Chunk {
    llvm::Value* element = nullptr;  // i64 flat index of its first element
    llvm::Value* col = nullptr;      // i64 column of its first element, made when first needed
    std::vector<std::vector<llvm::Value*>> loaded;  // per input: its `vector` values in f32
    std::vector<std::vector<llvm::Value*>> memo;    // per element of the chunk: per node
  };

  using ChunkHandler = std::function<void(const std::vector<llvm::Value*>& chunks)>;

  // --- The function, its arguments, its special registers ---------------------------------

  void declare_kernel(const std::string& name) {
    llvm::Type* global_ptr = llvm::PointerType::get(context_, kGlobal);
    const std::size_t pointers = program_.inputs().size() + program_.outputs().size();
    std::vector<llvm::Type*> types(pointers, global_ptr);
    types.push_back(i64_);
    types.push_back(i64_);
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), types, false);
    function_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
    function_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    for (std::size_t i = 0; i < program_.inputs().size(); ++i) {
      llvm::Argument* arg = function_->getArg(static_cast<unsigned>(i));
      arg->setName(program_.inputs()[i].name);
      // readonly, not noalias: an output may be the input's own buffer (in place).
      arg->addAttr(llvm::Attribute::ReadOnly);
      arg->addAttr(llvm::Attribute::NoCapture);
      inputs_.push_back(arg);
    }
    for (std::size_t o = 0; o < program_.outputs().size(); ++o) {
      llvm::Argument* arg = function_->getArg(static_cast<unsigned>(program_.inputs().size() + o));
      arg->setName(program_.outputs()[o].name);
      arg->addAttr(llvm::Attribute::NoCapture);
      outputs_.push_back(arg);
    }
    rows_ = function_->getArg(static_cast<unsigned>(pointers));
    cols_ = function_->getArg(static_cast<unsigned>(pointers + 1));
    rows_->setName("rows");
    cols_->setName("cols");
    // The kernel computes its indices from params.block, not %ntid: a launch with another block
    // must fail, which .reqntid makes it do.
    llvm::NamedMDNode* annotations = module_.getOrInsertNamedMetadata("nvvm.annotations");
    annotations->addOperand(llvm::MDNode::get(
        context_, {llvm::ValueAsMetadata::get(function_), llvm::MDString::get(context_, "reqntidx"),
                   llvm::ConstantAsMetadata::get(b_.getInt32(static_cast<std::uint32_t>(params_.block)))}));
    entry_ = llvm::BasicBlock::Create(context_, "entry", function_);
    b_.SetInsertPoint(entry_);
  }

  llvm::Value* sreg(llvm::Intrinsic::ID id) {
    return b_.CreateZExt(b_.CreateCall(llvm::Intrinsic::getDeclaration(&module_, id)), i64_);
  }

  llvm::AllocaInst* variable(llvm::Type* type, const char* name) {
    llvm::IRBuilder<> at(entry_, entry_->begin());
    return at.CreateAlloca(type, nullptr, name);
  }

  llvm::Value* i64(std::int64_t v) { return b_.getInt64(static_cast<std::uint64_t>(v)); }

  llvm::Type* storage_type(Dtype dtype) {
    switch (dtype) {
      case Dtype::f16: return b_.getHalfTy();
      case Dtype::bf16: return b_.getBFloatTy();
      default: return f32_;
    }
  }

  // --- f32 math -------------------------------------------------------------------------

  llvm::Constant* constant(double v) { return llvm::ConstantFP::get(f32_, static_cast<float>(v)); }

  llvm::Value* contract(llvm::Value* v) {
    if (auto* inst = llvm::dyn_cast<llvm::Instruction>(v)) inst->setHasAllowContract(true);
    return v;
  }
  llvm::Value* fadd(llvm::Value* a, llvm::Value* c) { return contract(b_.CreateFAdd(a, c)); }
  llvm::Value* fsub(llvm::Value* a, llvm::Value* c) { return contract(b_.CreateFSub(a, c)); }
  llvm::Value* fmul(llvm::Value* a, llvm::Value* c) { return contract(b_.CreateFMul(a, c)); }

  llvm::Value* libdevice(const char* name, std::vector<llvm::Value*> args) {
    std::vector<llvm::Type*> types(args.size(), f32_);
    llvm::FunctionCallee callee = module_.getOrInsertFunction(name, llvm::FunctionType::get(f32_, types, false));
    return b_.CreateCall(callee, args);
  }

  // 1 / (1 + e^-x) through div.full.f32 (2 ulp): IEEE division is a dozen instructions with a
  // slow path, which left silu(a) * b issue-bound on the H100 (93% of a copy, where torch.compile's
  // Triton kernel, also an approximate division, ran at copy speed). A denominator of 2^126 or
  // more gives 0, where the true value is below 2^-126.
  llvm::Value* sigmoid(llvm::Value* x) {
    return libdevice("__nv_fast_fdividef", {constant(1.0), fadd(constant(1.0), libdevice("__nv_expf", {b_.CreateFNeg(x)}))});
  }

  // Division by a value that is the same for a whole row (a row sum) or the whole kernel (a
  // constant) multiplies by its reciprocal, computed once (softmax divides every element by its
  // row's sum): within an ulp of the quotient, at a multiply's cost.
  void note_reciprocals(ShapeClass shape, int depth, const std::vector<llvm::Value*>& values) {
    for (const Node& n : program_.nodes()) {
      if (n.op != Op::div) continue;
      const auto divisor = static_cast<std::size_t>(n.args[1]);
      const Node& d = program_.node(n.args[1]);
      if (d.shape != shape || d.reduction_depth != depth || reciprocal_[divisor] != nullptr) continue;
      reciprocal_[divisor] = b_.CreateFDiv(constant(1.0), values[divisor], "reciprocal");
    }
  }

  llvm::Value* round_through(llvm::Value* x, Dtype dtype) {
    if (dtype == Dtype::f32) return x;
    return b_.CreateFPExt(b_.CreateFPTrunc(x, storage_type(dtype)), f32_);
  }

  // The value of a node that is neither an input nor a reduction, from its operands' values
  // (f32, or i1 for a boolean).
  llvm::Value* apply(const Node& n, const std::vector<llvm::Value*>& a) {
    switch (n.op) {
      case Op::constant: return constant(n.value);
      case Op::neg: return b_.CreateFNeg(a[0]);
      case Op::abs: return libdevice("__nv_fabsf", {a[0]});
      case Op::exp: return libdevice("__nv_expf", {a[0]});
      case Op::log: return libdevice("__nv_logf", {a[0]});
      case Op::sqrt: return libdevice("__nv_sqrtf", {a[0]});
      case Op::rsqrt: return libdevice("__nv_rsqrtf", {a[0]});
      case Op::tanh: return libdevice("__nv_tanhf", {a[0]});
      case Op::sigmoid: return sigmoid(a[0]);
      case Op::silu: return fmul(a[0], sigmoid(a[0]));
      case Op::relu: return libdevice("__nv_fmaxf", {a[0], constant(0.0)});
      case Op::gelu: {
        llvm::Value* x = a[0];
        llvm::Value* cube = fmul(x, fmul(x, x));
        llvm::Value* inner = fmul(constant(0.7978845608028654), fadd(x, fmul(constant(0.044715), cube)));
        return fmul(fmul(constant(0.5), x), fadd(constant(1.0), libdevice("__nv_tanhf", {inner})));
      }
      case Op::gelu_erf: {
        llvm::Value* x = a[0];
        llvm::Value* erf = libdevice("__nv_erff", {fmul(x, constant(0.70710678118654752440))});
        return fmul(fmul(constant(0.5), x), fadd(constant(1.0), erf));
      }
      case Op::add: return fadd(a[0], a[1]);
      case Op::sub: return fsub(a[0], a[1]);
      case Op::mul: return fmul(a[0], a[1]);
      case Op::div: {
        llvm::Value* reciprocal = reciprocal_[static_cast<std::size_t>(n.args[1])];
        return reciprocal != nullptr ? fmul(a[0], reciprocal) : b_.CreateFDiv(a[0], a[1]);
      }
      case Op::min: return libdevice("__nv_fminf", {a[0], a[1]});
      case Op::max: return libdevice("__nv_fmaxf", {a[0], a[1]});
      // C's comparisons: ordered, except != (true when either is NaN).
      case Op::lt: return b_.CreateFCmpOLT(a[0], a[1]);
      case Op::le: return b_.CreateFCmpOLE(a[0], a[1]);
      case Op::gt: return b_.CreateFCmpOGT(a[0], a[1]);
      case Op::ge: return b_.CreateFCmpOGE(a[0], a[1]);
      case Op::eq: return b_.CreateFCmpOEQ(a[0], a[1]);
      case Op::ne: return b_.CreateFCmpUNE(a[0], a[1]);
      case Op::where: return b_.CreateSelect(a[0], a[1], a[2]);
      case Op::cast: {
        llvm::Value* x = a[0];
        if (x->getType()->isIntegerTy(1)) x = b_.CreateUIToFP(x, f32_);
        return round_through(x, n.dtype);
      }
      default: break;
    }
    throw Error(ErrorKind::compile, 0, std::string("expr lowering: no rule for op ") + to_string(n.op));
  }

  // Scalars (literals and what is built only from them) once, in the entry block.
  void compute_scalars() {
    const auto& nodes = program_.nodes();
    for (std::size_t id = 0; id < nodes.size(); ++id) {
      const Node& n = nodes[id];
      if (n.shape != ShapeClass::scalar) continue;
      std::vector<llvm::Value*> args;
      for (const NodeId a : n.args) args.push_back(scalar_[static_cast<std::size_t>(a)]);
      scalar_[id] = apply(n, args);
    }
    note_reciprocals(ShapeClass::scalar, 0, scalar_);
  }

  // --- Per-element values -------------------------------------------------------------------

  Chunk make_chunk(llvm::Value* element, llvm::Value* col) {
    Chunk c;
    c.element = element;
    c.col = col;
    c.loaded.resize(program_.inputs().size());
    c.memo.assign(static_cast<std::size_t>(params_.vector), std::vector<llvm::Value*>(program_.nodes().size()));
    return c;
  }

  llvm::Value* column(Chunk& c) {
    if (c.col == nullptr) c.col = b_.CreateURem(c.element, cols_, "col");
    return c.col;
  }

  const std::vector<llvm::Value*>& load_input(int index, Chunk& c) {
    auto& values = c.loaded[static_cast<std::size_t>(index)];
    if (!values.empty()) return values;
    const Input& in = program_.inputs()[static_cast<std::size_t>(index)];
    llvm::Type* type = storage_type(in.dtype);
    llvm::Value* offset = in.kind == InputKind::row ? column(c) : c.element;
    llvm::Value* address = b_.CreateInBoundsGEP(type, inputs_[static_cast<std::size_t>(index)], offset);
    const int v = params_.vector;
    auto widen = [&](llvm::Value* x) { return in.dtype == Dtype::f32 ? x : b_.CreateFPExt(x, f32_); };
    if (v == 1) {
      values.push_back(widen(b_.CreateAlignedLoad(type, address, llvm::Align(storage_bytes(in.dtype)), in.name)));
    } else {
      auto* vector_type = llvm::FixedVectorType::get(type, static_cast<unsigned>(v));
      llvm::Value* loaded =
          b_.CreateAlignedLoad(vector_type, address, llvm::Align(static_cast<std::uint64_t>(v * storage_bytes(in.dtype))), in.name);
      for (int j = 0; j < v; ++j) values.push_back(widen(b_.CreateExtractElement(loaded, static_cast<std::uint64_t>(j))));
    }
    return values;
  }

  // A node's f32 (or i1) value at element j of chunk c: scalars and per-row values from the
  // caches filled before, everything else once per element.
  llvm::Value* value(NodeId id, Chunk& c, int j) {
    const Node& n = program_.node(id);
    const auto index = static_cast<std::size_t>(id);
    if (n.shape == ShapeClass::scalar) return scalar_[index];
    if (n.shape == ShapeClass::per_row) {
      if (row_[index] == nullptr) {
        throw Error(ErrorKind::compile, 0, "expr lowering: a per-row value used before its pass");
      }
      return row_[index];
    }
    llvm::Value*& slot = c.memo[static_cast<std::size_t>(j)][index];
    if (slot != nullptr) return slot;
    llvm::Value* result = nullptr;
    if (n.op == Op::input) {
      result = load_input(n.input, c)[static_cast<std::size_t>(j)];
    } else {
      std::vector<llvm::Value*> args;
      for (const NodeId a : n.args) args.push_back(value(a, c, j));
      result = apply(n, args);
    }
    slot = result;  // the recursion above fills other slots, never resizes memo
    return result;
  }

  // Every output at every element of `chunks`: all loads and math first, then all stores, so the
  // loads of one step are not held behind stores that might alias them (in place).
  void compute_and_store(std::vector<Chunk>& chunks) {
    const auto& outs = program_.outputs();
    const int v = params_.vector;
    std::vector<std::vector<std::vector<llvm::Value*>>> results(chunks.size());
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      for (const Output& out : outs) {
        std::vector<llvm::Value*> lanes;
        for (int j = 0; j < v; ++j) {
          llvm::Value* x = value(out.node, chunks[k], j);
          lanes.push_back(out.dtype == Dtype::f32 ? x : b_.CreateFPTrunc(x, storage_type(out.dtype)));
        }
        results[k].push_back(std::move(lanes));
      }
    }
    for (std::size_t k = 0; k < chunks.size(); ++k) {
      for (std::size_t o = 0; o < outs.size(); ++o) {
        llvm::Type* type = storage_type(outs[o].dtype);
        llvm::Value* address = b_.CreateInBoundsGEP(type, outputs_[o], chunks[k].element);
        const auto& lanes = results[k][o];
        if (v == 1) {
          b_.CreateAlignedStore(lanes[0], address, llvm::Align(storage_bytes(outs[o].dtype)));
        } else {
          auto* vector_type = llvm::FixedVectorType::get(type, static_cast<unsigned>(v));
          llvm::Value* packed = llvm::PoisonValue::get(vector_type);
          for (int j = 0; j < v; ++j) packed = b_.CreateInsertElement(packed, lanes[static_cast<std::size_t>(j)], static_cast<std::uint64_t>(j));
          b_.CreateAlignedStore(packed, address, llvm::Align(static_cast<std::uint64_t>(v * storage_bytes(outs[o].dtype))));
        }
      }
    }
  }

  // --- Loops ----------------------------------------------------------------------------------

  // for (base = start; base < limit; base += step): the chunks base + k * lane_stride + lane,
  // k < items. A step wholly below `limit` (uniform over the participants) takes them all
  // unguarded, in one call of `handle`; the last, partial one guards each.
  void walk(llvm::Value* start, llvm::Value* step, llvm::Value* limit, llvm::Value* lane, int lane_stride,
            const ChunkHandler& handle) {
    const int items = params_.items;
    const std::int64_t span = std::int64_t{lane_stride} * items;
    llvm::AllocaInst* base = variable(i64_, "base");
    b_.CreateStore(start, base);
    auto* header = llvm::BasicBlock::Create(context_, "walk", function_);
    auto* body = llvm::BasicBlock::Create(context_, "walk.body", function_);
    auto* full = llvm::BasicBlock::Create(context_, "walk.full", function_);
    auto* tail = llvm::BasicBlock::Create(context_, "walk.tail", function_);
    auto* latch = llvm::BasicBlock::Create(context_, "walk.next", function_);
    auto* exit = llvm::BasicBlock::Create(context_, "walk.done", function_);
    b_.CreateBr(header);

    b_.SetInsertPoint(header);
    llvm::Value* at = b_.CreateLoad(i64_, base, "at");
    b_.CreateCondBr(b_.CreateICmpSLT(at, limit), body, exit);

    b_.SetInsertPoint(body);
    llvm::Value* first = b_.CreateAdd(at, lane, "first", true, true);
    b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(at, i64(span), "", true, true), limit), full, tail);

    b_.SetInsertPoint(full);
    std::vector<llvm::Value*> chunks;
    for (int k = 0; k < items; ++k) chunks.push_back(b_.CreateAdd(first, i64(std::int64_t{k} * lane_stride), "chunk", true, true));
    handle(chunks);
    b_.CreateBr(latch);

    b_.SetInsertPoint(tail);
    for (int k = 0; k < items; ++k) {
      llvm::Value* chunk = b_.CreateAdd(first, i64(std::int64_t{k} * lane_stride), "chunk", true, true);
      auto* work = llvm::BasicBlock::Create(context_, "walk.item", function_);
      b_.CreateCondBr(b_.CreateICmpSLT(chunk, limit), work, latch);
      b_.SetInsertPoint(work);
      handle({chunk});
    }
    b_.CreateBr(latch);

    b_.SetInsertPoint(latch);
    b_.CreateStore(b_.CreateAdd(at, step, "", true, true), base);
    b_.CreateBr(header);

    b_.SetInsertPoint(exit);
  }

  // --- The pointwise kernel -------------------------------------------------------------------

  void build_pointwise_kernel() {
    const int v = params_.vector;
    const std::int64_t span = std::int64_t{params_.block} * params_.items;
    llvm::Value* n = b_.CreateMul(rows_, cols_, "n", true, true);
    llvm::Value* chunks = v == 1 ? n : b_.CreateUDiv(n, i64(v), "chunks", true);
    llvm::Value* thread = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    llvm::Value* block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* grid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    walk(b_.CreateMul(block, i64(span), "", true, true), b_.CreateMul(grid, i64(span), "", true, true), chunks,
         thread, params_.block, [&](const std::vector<llvm::Value*>& indices) {
           std::vector<Chunk> work;
           for (llvm::Value* index : indices) {
             llvm::Value* element = v == 1 ? index : b_.CreateMul(index, i64(v), "element", true, true);
             work.push_back(make_chunk(element, nullptr));
           }
           compute_and_store(work);
         });
  }

  // --- The row kernel -------------------------------------------------------------------------

  static bool is_max_like(Op op) { return op == Op::row_max || op == Op::row_min; }

  llvm::Value* identity(Op op) {
    // fmax/fmin ignore a NaN, so NaN is their identity, and a row of NaN alone stays NaN.
    return is_max_like(op) ? llvm::ConstantFP::getQNaN(f32_) : constant(0.0);
  }

  llvm::Value* combine(Op op, llvm::Value* a, llvm::Value* c) {
    switch (op) {
      case Op::row_max: return libdevice("__nv_fmaxf", {a, c});
      case Op::row_min: return libdevice("__nv_fminf", {a, c});
      default: return fadd(a, c);
    }
  }

  // Butterfly over the warp: every lane ends with the same bits (each step combines the same two
  // values, and the operations commute exactly).
  llvm::Value* warp_combine(Op op, llvm::Value* v) {
    llvm::Function* shuffle = llvm::Intrinsic::getDeclaration(&module_, llvm::Intrinsic::nvvm_shfl_sync_bfly_f32);
    for (int offset = kWarp / 2; offset >= 1; offset /= 2) {
      llvm::Value* other = b_.CreateCall(shuffle, {b_.getInt32(0xffffffffu), v, b_.getInt32(static_cast<std::uint32_t>(offset)), b_.getInt32(kWarp - 1)});
      v = combine(op, v, other);
    }
    return v;
  }

  void barrier() { b_.CreateCall(llvm::Intrinsic::getDeclaration(&module_, llvm::Intrinsic::nvvm_barrier0)); }

  // The group's totals of one pass's accumulators, the same in every thread of the group.
  std::vector<llvm::Value*> group_combine(const std::vector<NodeId>& reductions, const std::vector<llvm::AllocaInst*>& accumulators,
                                          llvm::Value* thread) {
    std::vector<llvm::Value*> totals;
    for (std::size_t r = 0; r < reductions.size(); ++r) {
      totals.push_back(warp_combine(program_.node(reductions[r]).op, b_.CreateLoad(f32_, accumulators[r])));
    }
    const int warps = params_.threads_per_row / kWarp;
    if (warps == 1) return totals;
    // Lane 0 of each warp writes its warp's totals; after the barrier every thread reads all the
    // warps' in the same order (so all agree to the bit); the second barrier keeps the next
    // pass's writes behind this pass's reads.
    llvm::Value* warp = b_.CreateLShr(thread, i64(5), "warp");
    llvm::Value* lane = b_.CreateAnd(thread, i64(kWarp - 1), "lane");
    auto* write = llvm::BasicBlock::Create(context_, "combine.write", function_);
    auto* read = llvm::BasicBlock::Create(context_, "combine.read", function_);
    b_.CreateCondBr(b_.CreateICmpEQ(lane, i64(0)), write, read);
    b_.SetInsertPoint(write);
    for (std::size_t r = 0; r < totals.size(); ++r) {
      llvm::Value* slot = b_.CreateAdd(i64(static_cast<std::int64_t>(r) * warps), warp, "", true, true);
      b_.CreateAlignedStore(totals[r], b_.CreateInBoundsGEP(f32_, shared_, slot), llvm::Align(4));
    }
    b_.CreateBr(read);
    b_.SetInsertPoint(read);
    barrier();
    for (std::size_t r = 0; r < totals.size(); ++r) {
      const Op op = program_.node(reductions[r]).op;
      llvm::Value* total = nullptr;
      for (int w = 0; w < warps; ++w) {
        llvm::Value* x = b_.CreateAlignedLoad(
            f32_, b_.CreateInBoundsGEP(f32_, shared_, i64(static_cast<std::int64_t>(r) * warps + w)), llvm::Align(4));
        total = total == nullptr ? x : combine(op, total, x);
      }
      totals[r] = total;
    }
    barrier();
    return totals;
  }

  // The reductions of depth p with their accumulators, set to their identities.
  std::pair<std::vector<NodeId>, std::vector<llvm::AllocaInst*>> start_pass(int p, const std::vector<llvm::AllocaInst*>& accumulators) {
    const auto& reductions = program_.reductions();
    std::vector<NodeId> pass;
    std::vector<llvm::AllocaInst*> pass_accumulators;
    for (std::size_t i = 0; i < reductions.size(); ++i) {
      if (program_.node(reductions[i]).reduction_depth != p) continue;
      pass.push_back(reductions[i]);
      pass_accumulators.push_back(accumulators[i]);
      b_.CreateStore(identity(program_.node(reductions[i]).op), accumulators[i]);
    }
    return {pass, pass_accumulators};
  }

  // The group's totals of pass p, then what depends only on them (rsqrt(mean(x * x) + eps)): once
  // per row.
  void finish_pass(int p, const std::vector<NodeId>& pass, const std::vector<llvm::AllocaInst*>& pass_accumulators,
                   llvm::Value* thread, llvm::Value* cols_f32) {
    const std::vector<llvm::Value*> totals = group_combine(pass, pass_accumulators, thread);
    for (std::size_t i = 0; i < pass.size(); ++i) {
      const Node& n = program_.node(pass[i]);
      row_[static_cast<std::size_t>(pass[i])] = n.op == Op::row_mean ? b_.CreateFDiv(totals[i], cols_f32) : totals[i];
    }
    const auto& nodes = program_.nodes();
    for (std::size_t id = 0; id < nodes.size(); ++id) {
      const Node& n = nodes[id];
      if (n.shape != ShapeClass::per_row || is_reduction(n.op) || n.reduction_depth != p) continue;
      std::vector<llvm::Value*> args;
      for (const NodeId a : n.args) {
        const auto ai = static_cast<std::size_t>(a);
        args.push_back(program_.node(a).shape == ShapeClass::scalar ? scalar_[ai] : row_[ai]);
      }
      row_[id] = apply(n, args);
    }
    note_reciprocals(ShapeClass::per_row, p, row_);
  }

  // One row held in registers: each lane's `items` chunks (lane + k * group) are loaded once, a
  // chunk past the row's end reading the last chunk instead (a valid address) and contributing
  // its reduction's identity; the passes run in straight-line code over the values, and only the
  // chunks inside the row are stored, so no element is written twice (nor read after its
  // write, in place).
  void cached_row(llvm::Value* chunks, llvm::Value* lane, llvm::Value* thread, llvm::Value* cols_f32,
                  const std::vector<llvm::AllocaInst*>& accumulators, const std::function<Chunk(llvm::Value*)>& chunk_at) {
    const int v = params_.vector;
    const int group = params_.threads_per_row;
    llvm::Value* last = b_.CreateSub(chunks, i64(1), "last_chunk", true, true);
    std::vector<Chunk> work;
    std::vector<llvm::Value*> inside;
    for (int k = 0; k < params_.items; ++k) {
      llvm::Value* index = b_.CreateAdd(lane, i64(std::int64_t{k} * group), "chunk", true, true);
      inside.push_back(b_.CreateICmpSLT(index, chunks, "inside"));
      work.push_back(chunk_at(b_.CreateSelect(inside.back(), index, last)));
    }
    for (int p = 1; p <= program_.passes(); ++p) {
      const auto [pass, pass_accumulators] = start_pass(p, accumulators);
      for (std::size_t i = 0; i < pass.size(); ++i) {
        const Node& n = program_.node(pass[i]);
        llvm::Value* acc = b_.CreateLoad(f32_, pass_accumulators[i]);
        for (std::size_t k = 0; k < work.size(); ++k) {
          for (int j = 0; j < v; ++j) {
            acc = combine(n.op, acc, b_.CreateSelect(inside[k], value(n.args[0], work[k], j), identity(n.op)));
          }
        }
        b_.CreateStore(acc, pass_accumulators[i]);
      }
      finish_pass(p, pass, pass_accumulators, thread, cols_f32);
    }
    for (std::size_t k = 0; k < work.size(); ++k) {
      auto* store = llvm::BasicBlock::Create(context_, "cached.store", function_);
      auto* done = llvm::BasicBlock::Create(context_, "cached.stored", function_);
      b_.CreateCondBr(inside[k], store, done);
      b_.SetInsertPoint(store);
      std::vector<Chunk> one{work[k]};
      compute_and_store(one);
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    }
  }

  void build_row_kernel() {
    const int v = params_.vector;
    const int group = params_.threads_per_row;
    const std::int64_t rows_per_block = params_.block / group;
    const auto& reductions = program_.reductions();

    // Shared memory for the block-per-row combine: one float per warp per reduction of a pass.
    if (group > kWarp) {
      std::size_t widest = 0;
      for (int p = 1; p <= program_.passes(); ++p) {
        widest = std::max<std::size_t>(widest, static_cast<std::size_t>(std::count_if(
            reductions.begin(), reductions.end(), [&](NodeId id) { return program_.node(id).reduction_depth == p; })));
      }
      auto* type = llvm::ArrayType::get(f32_, widest * static_cast<std::size_t>(group / kWarp));
      shared_ = new llvm::GlobalVariable(module_, type, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::UndefValue::get(type), "partials", nullptr,
                                         llvm::GlobalValue::NotThreadLocal, kShared);
      shared_->setAlignment(llvm::Align(16));
    }

    llvm::Value* thread = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    llvm::Value* block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    llvm::Value* grid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
    llvm::Value* lane = group == params_.block ? thread : b_.CreateAnd(thread, i64(group - 1), "lane");
    llvm::Value* first_row =
        group == params_.block ? block
                               : b_.CreateAdd(b_.CreateMul(block, i64(rows_per_block), "", true, true),
                                              b_.CreateLShr(thread, i64(5)), "first_row", true, true);
    llvm::Value* row_step = b_.CreateMul(grid, i64(rows_per_block), "row_step", true, true);
    llvm::Value* chunks = v == 1 ? cols_ : b_.CreateUDiv(cols_, i64(v), "row_chunks", true);
    llvm::Value* cols_f32 = b_.CreateSIToFP(cols_, f32_, "cols_f32");

    std::vector<llvm::AllocaInst*> accumulators;
    for (std::size_t r = 0; r < reductions.size(); ++r) accumulators.push_back(variable(f32_, "acc"));

    llvm::AllocaInst* row = variable(i64_, "row");
    b_.CreateStore(first_row, row);
    auto* header = llvm::BasicBlock::Create(context_, "row", function_);
    auto* body = llvm::BasicBlock::Create(context_, "row.body", function_);
    auto* exit = llvm::BasicBlock::Create(context_, "row.done", function_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::Value* r = b_.CreateLoad(i64_, row, "r");
    b_.CreateCondBr(b_.CreateICmpSLT(r, rows_), body, exit);

    b_.SetInsertPoint(body);
    llvm::Value* row_base = b_.CreateMul(r, cols_, "row_base", true, true);
    auto chunk_at = [&](llvm::Value* index) {
      llvm::Value* col = v == 1 ? index : b_.CreateMul(index, i64(v), "col", true, true);
      return make_chunk(b_.CreateAdd(row_base, col, "element", true, true), col);
    };
    const std::int64_t span = std::int64_t{group} * params_.items;
    // A row that fits in one step of the group (chunks <= group * items, the same for every row)
    // is loaded once into registers and every pass reads it from there; a longer row is streamed
    // from memory once per pass. The branch is uniform over the block, so barriers stay legal.
    auto* cached = llvm::BasicBlock::Create(context_, "row.cached", function_);
    auto* streamed = llvm::BasicBlock::Create(context_, "row.streamed", function_);
    auto* next = llvm::BasicBlock::Create(context_, "row.next", function_);
    b_.CreateCondBr(b_.CreateICmpSLE(chunks, i64(span), "row_fits"), cached, streamed);

    b_.SetInsertPoint(cached);
    cached_row(chunks, lane, thread, cols_f32, accumulators, chunk_at);
    b_.CreateBr(next);

    b_.SetInsertPoint(streamed);
    // Per-row values of the cached path live in its blocks: none may be reused here.
    std::fill(row_.begin(), row_.end(), nullptr);
    for (std::size_t id = 0; id < reciprocal_.size(); ++id) {
      if (program_.node(static_cast<NodeId>(id)).shape == ShapeClass::per_row) reciprocal_[id] = nullptr;
    }
    for (int p = 1; p <= program_.passes(); ++p) {
      const auto [pass, pass_accumulators] = start_pass(p, accumulators);
      walk(i64(0), i64(span), chunks, lane, group, [&](const std::vector<llvm::Value*>& indices) {
        for (llvm::Value* index : indices) {
          Chunk c = chunk_at(index);
          for (std::size_t i = 0; i < pass.size(); ++i) {
            const Node& n = program_.node(pass[i]);
            llvm::Value* acc = b_.CreateLoad(f32_, pass_accumulators[i]);
            for (int j = 0; j < v; ++j) acc = combine(n.op, acc, value(n.args[0], c, j));
            b_.CreateStore(acc, pass_accumulators[i]);
          }
        }
      });
      finish_pass(p, pass, pass_accumulators, thread, cols_f32);
    }
    walk(i64(0), i64(span), chunks, lane, group, [&](const std::vector<llvm::Value*>& indices) {
      std::vector<Chunk> work;
      for (llvm::Value* index : indices) work.push_back(chunk_at(index));
      compute_and_store(work);
    });
    b_.CreateBr(next);

    b_.SetInsertPoint(next);
    b_.CreateStore(b_.CreateAdd(r, row_step, "", true, true), row);
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
  }

  const Program& program_;
  const LowerParams params_;
  llvm::Module& module_;
  llvm::LLVMContext& context_;
  llvm::IRBuilder<> b_;
  llvm::Type* f32_;
  llvm::IntegerType* i64_;
  llvm::Function* function_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::vector<llvm::Value*> inputs_;
  std::vector<llvm::Value*> outputs_;
  llvm::Value* rows_ = nullptr;
  llvm::Value* cols_ = nullptr;
  llvm::GlobalVariable* shared_ = nullptr;
  std::vector<llvm::Value*> scalar_;  // per node: scalars, in the entry block
  std::vector<llvm::Value*> row_;     // per node: per-row values, in the row loop's body
  std::vector<llvm::Value*> reciprocal_;  // per node: 1 / its value, for the divisors of note_reciprocals
};

}  // namespace

std::string violation(const Program& program, const LowerParams& params) {
  if (params.block < kWarp || params.block > 1024 || params.block % kWarp != 0) {
    return "block must be a multiple of 32 in [32, 1024], not " + std::to_string(params.block);
  }
  if (params.items < 1 || params.items > kMaxItems) {
    return "items must be in [1, " + std::to_string(kMaxItems) + "], not " + std::to_string(params.items);
  }
  if (params.vector != 1 && params.vector != 2 && params.vector != 4 && params.vector != 8) {
    return "vector must be 1, 2, 4 or 8, not " + std::to_string(params.vector);
  }
  // 8 elements are one 16-byte access only at 16-bit storage; 32 bytes of f32 would be two.
  if (params.vector == 8) {
    for (const auto& in : program.inputs()) {
      if (storage_bytes(in.dtype) != 2) return "vector 8 needs 16-bit storage, but input '" + in.name + "' is fp32";
    }
    for (const auto& out : program.outputs()) {
      if (storage_bytes(out.dtype) != 2) return "vector 8 needs 16-bit storage, but output '" + out.name + "' is fp32";
    }
  }
  if (program.has_reduction() && params.threads_per_row != kWarp && params.threads_per_row != params.block) {
    return "threads_per_row must be 32 (a warp per row) or block (" + std::to_string(params.block) +
           ", a block per row) for a program with reductions, not " + std::to_string(params.threads_per_row);
  }
  return {};
}

std::string violation(const Program& program, const LowerParams& params, std::int64_t rows, std::int64_t cols) {
  std::string why = violation(program, params);
  if (!why.empty()) return why;
  if (rows < 1 || cols < 1) {
    return "rows and cols must be positive, not " + std::to_string(rows) + " x " + std::to_string(cols);
  }
  if (rows >= kMaxElements / cols) {
    return "rows * cols must be below 2^62, not " + std::to_string(rows) + " x " + std::to_string(cols);
  }
  if (params.vector > 1 && cols % params.vector != 0) {
    return "vector = " + std::to_string(params.vector) + " needs cols % vector == 0, but cols = " + std::to_string(cols);
  }
  return {};
}

LaunchGeometry geometry(const Program& program, const LowerParams& params, std::int64_t rows, std::int64_t cols) {
  const std::string why = violation(program, params, rows, cols);
  if (!why.empty()) usage("expr kernel geometry (" + describe(params) + "): " + why);
  std::int64_t blocks = 0;
  if (program.has_reduction()) {
    const std::int64_t rows_per_block = params.block / params.threads_per_row;
    blocks = (rows + rows_per_block - 1) / rows_per_block;
  } else {
    const std::int64_t chunks = rows * cols / params.vector;
    const std::int64_t per_block = std::int64_t{params.block} * params.items;
    blocks = (chunks + per_block - 1) / per_block;
  }
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(blocks, kMaxGrid));
  g.block[0] = static_cast<unsigned>(params.block);
  return g;
}

LoweredKernel lower(const Program& program, const LowerParams& params, const std::string& arch) {
  const std::string why = violation(program, params);
  if (!why.empty()) usage("cannot lower the expression with " + describe(params) + ": " + why);
  if (program.outputs().empty()) usage("cannot lower an expression program without outputs");
  LoweredKernel kernel;
  kernel.name = name_of(program, params);
  kernel.params = params;
  kernel.arch = arch;
  kernel.reduces = program.has_reduction();
  kernel.passes = kernel.reduces ? program.passes() + 1 : 1;
  NvptxModule made = make_nvptx_module(kernel.name, arch);
  Lowering(program, params, *made.module).build(kernel.name);
  {
    llvm::raw_string_ostream out(kernel.ir);
    made.module->print(out, nullptr);
  }
  PtxResult ptx = emit_ptx(*made.module, arch);
  kernel.ptx = std::move(ptx.ptx);
  kernel.cubin = link_ptx(kernel.ptx, arch).cubin;
  return kernel;
}

}  // namespace gmjit::codegen::expr
