//! Cranelift backend (placeholder until the JIT lands): compiles through the interpreter.
use super::{Backend, BackendKind, CompiledKernel};
use crate::error::Result;
use crate::kernel::Kernel;
use std::sync::Arc;

pub struct CraneliftBackend;
impl CraneliftBackend {
    pub fn new() -> Result<Self> {
        Ok(CraneliftBackend)
    }
}
impl Backend for CraneliftBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cranelift
    }
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        super::interp::Interp.compile(kernel)
    }
}
