//! Cranelift backend: compiles kernel IR to native SIMD code with the Cranelift JIT. A [`Kernel`]
//! becomes one `extern "C" fn(args: *const LaunchArgs, start: u64, end: u64)` running lanes
//! `[start, end)` four at a time in 128-bit vectors (32-bit types as one `I32X4`/`F32X4`, 64-bit
//! types as two `I64X2`/`F64X2`, masks as `I32X4` all-ones/zero lanes), bit-for-bit the scalar
//! semantics in `op` (NaN payloads aside). This module holds the shared code-generation state
//! (`Gen`, `Target`, `Tuning`, the lane value `V`) and type helpers; the submodules, the rest.

mod affine;
mod function;
mod jit;
mod lower;
mod memory;
mod opt;
mod region;
mod shift;
mod vector;

pub use jit::CraneliftBackend;

use crate::kernel::Kernel;
use crate::ty::VarType;
use affine::Affine;
use cranelift_codegen::ir::types::{F32X4, F64X2, I32X4, I64X2};
use cranelift_codegen::ir::{FuncRef, MemFlags, Type, Value};
use cranelift_frontend::{FunctionBuilder, Variable};
use std::collections::HashMap;

/// Lanes per loop iteration (one 128-bit vector of 32-bit lanes).
const W: i64 = 4;
/// Symbol under which compiled code finds `scatter_lane_extern`.
const SCATTER_SYMBOL: &str = "kiln_scatter_lane";

/// Code-generation choices that never change results, only speed.
#[derive(Clone, Copy, Debug)]
struct Tuning {
    /// Groups of four lanes per iteration of the main loop; 0 picks one from the kernel's size.
    unroll: usize,
    /// Emit the groups of an unrolled iteration this many at a time, instruction by instruction
    /// (so that independent chains sit next to each other); 1: one group after the other.
    interleave: usize,
    /// Compute registers that are affine functions of the lane index from the index directly
    /// (see `affine_values`).
    affine: bool,
    /// Read each constant at each use (0), once per instruction of all interleaved groups (1), or
    /// once per loop body (2).
    const_cache: u8,
    /// Reorder the loop body to keep few values live (see `Gen::body_order`).
    schedule: bool,
}

// ---------------------------------------------------------------------------------------------
// Code generation.

/// A kernel register's value for the four lanes of one iteration.
#[derive(Clone, Copy, Debug)]
enum V {
    /// Bool (an `I32X4` mask), I32/U32 (`I32X4`), F32 (`F32X4`).
    One(Value),
    /// I64/U64 (`I64X2` ×2), F64 (`F64X2` ×2): lanes 0–1, then 2–3.
    Two(Value, Value),
}

fn is_wide(t: VarType) -> bool {
    t.size_bytes() == 8
}
/// Vector type of one part of a value of type `t`.
fn vty(t: VarType) -> Type {
    match t {
        VarType::Bool | VarType::I32 | VarType::U32 => I32X4,
        VarType::F32 => F32X4,
        VarType::I64 | VarType::U64 => I64X2,
        VarType::F64 => F64X2,
    }
}
/// Integer vector type with the same lanes as `vty(t)`.
fn ivty(t: VarType) -> Type {
    if is_wide(t) {
        I64X2
    } else {
        I32X4
    }
}
/// Scalar type of one lane of `vty(t)`.
fn lane_ty(t: VarType) -> Type {
    vty(t).lane_type()
}
fn log2_size(t: VarType) -> i64 {
    t.size_bytes().trailing_zeros() as i64
}
fn type_index(t: VarType) -> u32 {
    VarType::ALL
        .iter()
        .position(|&x| x == t)
        .expect("every type is in ALL") as u32
}

/// Shuffle mask taking 32-bit lanes `lanes` (0–7 over the concatenation of both operands).
fn lanes32(lanes: [u8; 4]) -> Vec<u8> {
    lanes
        .iter()
        .flat_map(|&l| (0..4).map(move |b| l * 4 + b))
        .collect()
}

/// What the code generator knows about the target beyond the Cranelift ISA flags.
#[derive(Clone, Copy, Debug)]
struct Target {
    /// x86-64: the `x86_*` CLIF instructions lower.
    x86: bool,
    /// SSE4.1 (`blendv`, `pmulld`).
    sse41: bool,
    /// x86 without AVX: SSE `cmpps`/`cmppd` need 16-byte aligned memory operands, but Cranelift
    /// 0.123 folds an unaligned load into them (its instruction table omits the alignment
    /// requirement), so float comparisons keep their operands in registers there.
    sse_only: bool,
    /// Whether Cranelift's e-graph pass runs (opt_level other than none): without it, literals are
    /// materialised where they are used rather than kept in registers across the loop.
    egraph: bool,
    /// Loop-body constants are loads from a table (folded into their users' memory operands, which
    /// with AVX need no alignment) emitted right before their use, instead of `vconst`s.
    pool: bool,
}

struct Gen<'a, 'f> {
    b: &'a mut FunctionBuilder<'f>,
    k: &'a Kernel,
    target: Target,
    mem: MemFlags,
    /// Values of the group being lowered (loop-invariant ones shared by all groups).
    vals: Vec<Option<V>>,
    uniform: Vec<bool>,
    /// Indices that are `counter + uniform` (see `backend::contiguous_indices`).
    contiguous: Vec<bool>,
    /// `contiguous` indices used only as the index of row reads and writes, and counters used
    /// only by those (`row_only_indices`): the main loop does not compute them; a row access of
    /// all groups needs only group 0's first lane, as a scalar (`row_start`), and a slow path or a
    /// single group's access computes the vector where it stands (`val`).
    row_only: Vec<bool>,
    /// Literal bits of `Literal` registers.
    lit: Vec<Option<u64>>,
    /// Shift amounts of registers that are loop-invariant shift amounts (not literals), as the
    /// masked scalar every lane shifts by.
    amount: Vec<Option<Value>>,
    bases: Vec<Option<Value>>,
    lens: Vec<Option<Value>>,
    status: Value,
    lane: Value,
    active: Option<Value>,
    /// Lowering the loop body (not the entry block).
    in_loop: bool,
    /// While lowering the main loop: each register's affine form in the lane index, if known
    /// (empty otherwise), and its broadcast value at the iteration's first lane.
    affine: Vec<Option<Affine>>,
    affine_base: Vec<Option<Value>>,
    /// The first lane of the iteration and the index of the group being lowered in it.
    iter_lane: Value,
    group: usize,
    /// The constant table (16-byte entries), its entries' offsets and its address.
    pool: Vec<u8>,
    pool_index: HashMap<[u8; 16], u32>,
    pool_base: Option<Value>,
    /// Constants already read from the table, reused while valid: within one instruction of the
    /// interleaved groups (`const_cache_per_inst`) or the whole loop body.
    const_cache_on: bool,
    const_cache_per_inst: bool,
    const_cache: HashMap<([u8; 16], Type), Value>,
    /// Lower the loop body in `body_order` rather than in the kernel's order.
    schedule: bool,
    /// Out-of-range lanes of gathers and of plain scatters, added to the status at the end.
    oob: Option<Variable>,
    oob_writes: Option<Variable>,
    /// The mask of a main-loop iteration, whose lanes are all below `end`: a gather or scatter
    /// whose mask is a literal `true` and whose lanes are active under exactly this mask needs no
    /// mask test (the value is compared by identity; uniform loops keep their entry mask).
    full_active: Option<Value>,
    /// `run_in_bounds`'s bound per (parameter, index type, lanes in the run), computed in the
    /// entry block.
    run_bounds: HashMap<(usize, VarType, i64), Value>,
    /// The helper that reducing scatters call.
    scatter: Option<FuncRef>,
    /// Open loops and switches, and the active lanes of each group inside them.
    regions: region::Regions,
}
