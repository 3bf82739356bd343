//! The host device: buffers in host memory, kernels run on kiln's thread pool, and the host
//! algorithms for everything else (reductions, prefix sums, compaction, copies, matmul, in-place
//! permutations). Only this module does pointer arithmetic on buffer contents.

use super::{Device, LaunchSpec, Permutation};
use crate::backend::STATUS_LEN;
use crate::error::Result;
use crate::op::ReduceOp;
use crate::registry::Buffer;
use crate::ty::VarType;
use std::sync::Arc;

pub(super) mod launch;
pub(super) mod matmul;
pub(super) mod memory;
pub(super) mod permute;
pub(super) mod private;
pub(super) mod reduce;
pub(super) mod run;

/// The host device (see the module comment); [`super::current`] returns it.
///
/// ```
/// use kiln_core::device::{Device, Host};
/// let buf = Host.upload(kiln_core::VarType::U32, &[1, 0, 0, 0, 2, 0, 0, 0]).unwrap();
/// assert_eq!(Host.reduce_bits(kiln_core::ReduceOp::Add, &buf), 3);
/// ```
pub struct Host;

impl Device for Host {
    fn name(&self) -> &'static str {
        "host"
    }
    fn launch(&self, spec: LaunchSpec, size: usize, buffers: &[&Buffer]) -> [u64; STATUS_LEN] {
        launch::launch_kernel(spec, size, buffers)
    }
    fn launch_split(
        &self,
        general: LaunchSpec,
        gbufs: &[&Buffer],
        interior: LaunchSpec,
        ibufs: &[(&Buffer, i64)],
        size: usize,
        plan: &Arc<crate::stencil::SplitPlan>,
        through_gaps: bool,
    ) -> [u64; STATUS_LEN] {
        launch::launch_split(general, gbufs, interior, ibufs, size, plan, through_gaps)
    }
    fn launch_reduce(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        out_param: usize,
        op: ReduceOp,
    ) -> Result<(Buffer, u64, [u64; STATUS_LEN])> {
        launch::launch_reduce(spec, size, inputs, out_param, op)
    }
    fn launch_reduce_many(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        reds: &[(usize, ReduceOp)],
    ) -> Result<(Vec<Buffer>, Vec<u64>, [u64; STATUS_LEN])> {
        launch::launch_reduce_many(spec, size, inputs, reds)
    }
    fn launch_block_reduce(
        &self,
        spec: LaunchSpec,
        size: usize,
        inputs: &[&Buffer],
        out_param: usize,
        op: ReduceOp,
        block: usize,
    ) -> Result<(Buffer, [u64; STATUS_LEN])> {
        launch::launch_block_reduce(spec, size, inputs, out_param, op, block)
    }
    fn upload(&self, ty: VarType, bytes: &[u8]) -> Result<Buffer> {
        memory::upload(ty, bytes)
    }
    fn alloc(&self, ty: VarType, len: usize, what: &dyn Fn() -> String) -> Result<Buffer> {
        Buffer::new(ty, len, what)
    }
    fn zeros(&self, ty: VarType, len: usize) -> Result<Buffer> {
        memory::placeholder_zeros(ty, len)
    }
    fn copy(&self, src: &Buffer) -> Result<Buffer> {
        memory::copy_buffer(src)
    }
    fn read(&self, buf: &Buffer) -> Vec<u8> {
        memory::read(buf)
    }
    fn reduce_bits(&self, op: ReduceOp, buf: &Buffer) -> u64 {
        reduce::reduce_bits(op, buf)
    }
    fn reduce(&self, op: ReduceOp, buf: &Buffer) -> Result<Buffer> {
        reduce::reduce(op, buf)
    }
    fn reduce_many(&self, reds: &[(ReduceOp, &Buffer)]) -> Result<Vec<Buffer>> {
        reduce::reduce_many(reds)
    }
    fn block_reduce(&self, op: ReduceOp, buf: &Buffer, block: usize) -> Result<Buffer> {
        reduce::block_reduce(op, buf, block)
    }
    fn prefix_sum(&self, buf: &Buffer, exclusive: bool) -> Result<Buffer> {
        reduce::prefix_sum(buf, exclusive)
    }
    fn compress(&self, buf: &Buffer) -> Result<Buffer> {
        reduce::compress(buf)
    }
    fn matmul(
        &self,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
        trans: super::Trans,
    ) -> Result<Buffer> {
        matmul::matmul(a, b, m, k, n, trans)
    }
    fn permute_in_place(&self, buf: &Buffer, p: Permutation) {
        permute::permute_in_place(buf, p)
    }
}
