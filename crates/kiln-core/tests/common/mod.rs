//! Scaffolding shared by the backend tests (`filetests`, `backend_diff`, `lane_blocking`): buffers
//! from the crate's allocator, as kernels get them at run time (64-byte aligned, with slack after
//! the last element), and the bitwise comparison under which every NaN is alike.
#![allow(dead_code)]

use kiln_core::alloc::{self, Block};
use kiln_core::backend::{read_bits, write_bits};
use kiln_core::VarType;

/// A buffer of `len` elements of `ty` from the crate's allocator, freed on drop.
pub struct Buf {
    block: Option<Block>,
    pub ty: VarType,
    pub len: usize,
}

impl Buf {
    /// Every byte (slack included) `0xA5`: a pattern no kernel that writes its output leaves.
    pub fn new(ty: VarType, len: usize) -> Buf {
        let block = alloc::alloc(len * ty.size_bytes(), &|| "test buffer".into()).expect("alloc");
        // SAFETY: the block holds `capacity()` writable bytes.
        unsafe { std::ptr::write_bytes(block.as_ptr(), 0xA5, block.capacity()) };
        Buf {
            block: Some(block),
            ty,
            len,
        }
    }
    /// Every element zero.
    pub fn zeroed(ty: VarType, len: usize) -> Buf {
        Buf::from_bits(ty, &vec![0; len])
    }
    /// Elements from a xorshift stream seeded by `seed`: floats in [−10, 10) in steps of 0.01,
    /// integers below 1000, random bools.
    pub fn pattern(ty: VarType, len: usize, seed: u64) -> Buf {
        let mut b = Buf::new(ty, len);
        let mut x = seed | 1;
        for i in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bits = match ty {
                VarType::F32 => ((x % 2000) as f32 * 0.01 - 10.0).to_bits() as u64,
                VarType::F64 => ((x % 2000) as f64 * 0.01 - 10.0).to_bits(),
                VarType::Bool => x & 1,
                _ => x % 1000,
            };
            b.set(i, bits);
        }
        b
    }
    /// A buffer holding `bits` (one element each, in `ty`'s width).
    pub fn from_bits(ty: VarType, bits: &[u64]) -> Buf {
        let mut b = Buf::new(ty, bits.len());
        for (i, &x) in bits.iter().enumerate() {
            b.set(i, x);
        }
        b
    }
    pub fn ptr(&self) -> *mut u8 {
        self.block.as_ref().expect("live").as_ptr()
    }
    pub fn get(&self, i: usize) -> u64 {
        assert!(i < self.len);
        // SAFETY: i < len, and the block holds len elements of ty.
        unsafe { read_bits(self.ptr(), self.ty, i) }
    }
    pub fn set(&mut self, i: usize, bits: u64) {
        assert!(i < self.len);
        // SAFETY: i < len, and this test owns the buffer.
        unsafe { write_bits(self.ptr(), self.ty, i, bits) }
    }
    pub fn copy(&self) -> Buf {
        Buf::from_bits(self.ty, &self.bits())
    }
    pub fn bits(&self) -> Vec<u64> {
        (0..self.len).map(|i| self.get(i)).collect()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            alloc::free(b);
        }
    }
}

/// Equal bits, or both NaN (of `ty`).
pub fn same_bits(ty: VarType, a: u64, b: u64) -> bool {
    a == b
        || match ty {
            VarType::F32 => f32::from_bits(a as u32).is_nan() && f32::from_bits(b as u32).is_nan(),
            VarType::F64 => f64::from_bits(a).is_nan() && f64::from_bits(b).is_nan(),
            _ => false,
        }
}
