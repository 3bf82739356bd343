//! Scaffolding shared by the backend tests (`filetests`, `backend_diff`, `lane_blocking`): buffers
//! from the crate's allocator, as kernels get them at run time (64-byte aligned, with slack after
//! the last element), the bitwise comparison under which every NaN is alike, and the backends
//! kernels are checked on besides the defaults: Cranelift's code-generation variants and code
//! compiled for the other kinds of host.
#![allow(dead_code)]

use kiln_core::alloc::{self, Block};
use kiln_core::backend::cranelift::CraneliftBackend;
use kiln_core::backend::llvm::LlvmBackend;
use kiln_core::backend::{read_bits, write_bits, Backend};
use kiln_core::kernel::Kernel;
use kiln_core::VarType;
use std::sync::{Mutex, OnceLock};

/// A buffer of `len` elements of `ty` from the crate's allocator, freed on drop.
pub struct Buf {
    block: Option<Block>,
    /// The element type.
    pub ty: VarType,
    /// The number of elements.
    pub len: usize,
}

impl Buf {
    /// Every byte (slack included) `0xA5`: a pattern no kernel that writes its output leaves (a
    /// `bool` is stored as 0 or 1, and elements are compared as raw bytes).
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
    /// The buffer's start, for a kernel's arguments.
    /// Element `i`'s raw bits: the whole byte of a `bool` (a backend that stores `true` as
    /// anything but 1 differs), the element's width of the others.
    pub fn get(&self, i: usize) -> u64 {
        assert!(i < self.len);
        if self.ty == VarType::Bool {
            // SAFETY: i < len, and the block holds len one-byte elements.
            return unsafe { *self.ptr().add(i) } as u64;
        }
        // SAFETY: i < len, and the block holds len elements of ty.
        unsafe { read_bits(self.ptr(), self.ty, i) }
    }
    /// Write element `i` (a `bool`'s whole byte: the low 8 bits of `bits`).
    pub fn set(&mut self, i: usize, bits: u64) {
        assert!(i < self.len);
        if self.ty == VarType::Bool {
            // SAFETY: i < len, and this test owns the buffer.
            unsafe { *self.ptr().add(i) = bits as u8 };
            return;
        }
        // SAFETY: i < len, and this test owns the buffer.
        unsafe { write_bits(self.ptr(), self.ty, i, bits) }
    }
    /// A new buffer with the same bytes (slack included).
    pub fn copy(&self) -> Buf {
        let b = Buf::new(self.ty, self.len);
        let (from, to) = (self.block.as_ref(), b.block.as_ref());
        let bytes = from
            .expect("live")
            .capacity()
            .min(to.expect("live").capacity());
        // SAFETY: both blocks hold at least `bytes` bytes and are distinct allocations.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr(), b.ptr(), bytes) };
        b
    }
    /// Every element's raw bits, in order.
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

/// LLVM backends generating code for the kinds of x86-64 host kiln runs on, whichever this one
/// is, each at the widest width its default backend picks (base lanes × 4 for small kernels):
/// AVX-512 (16 × 4), AVX2 (8 × 4) and baseline x86-64 (4 × 4). Their code is only compiled here
/// (verifier, O2, instruction selection), never run: it may not run on this CPU.
pub fn llvm_other_hosts() -> &'static [(String, LlvmBackend)] {
    static BE: OnceLock<Vec<(String, LlvmBackend)>> = OnceLock::new();
    BE.get_or_init(|| {
        if llvm().is_none() {
            return Vec::new();
        }
        [("skylake-avx512", 64), ("haswell", 32), ("x86-64", 16)]
            .into_iter()
            .map(|(cpu, w)| {
                let be = LlvmBackend::create_for_cpu(w, cpu, "")
                    .unwrap_or_else(|e| panic!("LLVM for {cpu}: {e}"));
                (format!("{cpu} w{w}"), be)
            })
            .collect()
    })
}

/// Cranelift with the AVX-512 flags of the other kind of host: off where this host has AVX-512
/// (its code runs here: the AVX2 host's code paths), on where it lacks it (compiled only).
pub fn cranelift_other_host() -> (&'static CraneliftBackend, bool) {
    static BE: OnceLock<(CraneliftBackend, bool)> = OnceLock::new();
    let (be, runs) = BE.get_or_init(|| {
        let here = std::is_x86_feature_detected!("avx512f");
        let v = if here { "false" } else { "true" };
        let mut s: Vec<(&str, &str)> = [
            "has_avx512f",
            "has_avx512vl",
            "has_avx512dq",
            "has_avx512bitalg",
            "has_avx512vbmi",
        ]
        .iter()
        .map(|k| (*k, v))
        .collect();
        if !here {
            // (AVX-512 implies the AVX2 family)
            s.extend(
                ["has_avx", "has_avx2", "has_fma", "has_sse41", "has_sse42"].map(|k| (k, "true")),
            );
        }
        s.push(("enable_verifier", "true"));
        let be = CraneliftBackend::with_settings(&s).expect("cranelift for the other host");
        (be, here)
    });
    (be, *runs)
}

/// `kernel` compiles for every other kind of host (see `llvm_other_hosts`, `cranelift_other_host`);
/// once per distinct kernel (the hand-written cases check each kernel on many variants).
pub fn compiles_for_other_hosts(kernel: &Kernel) -> Result<(), String> {
    static DONE: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let key = kernel.hash().to_string();
    if DONE.lock().unwrap().contains(&key) {
        return Ok(());
    }
    for (name, be) in llvm_other_hosts() {
        be.object_code(kernel)
            .map_err(|e| format!("llvm for {name}: {e}\n{kernel}"))?;
    }
    let (be, runs) = cranelift_other_host();
    if !runs {
        be.compile(kernel)
            .map_err(|e| format!("cranelift with AVX-512: {e}\n{kernel}"))?;
    }
    DONE.lock().unwrap().push(key);
    Ok(())
}

/// The LLVM backend (without the disk cache), or None with one line saying why its tests are
/// skipped on this machine.
pub fn llvm() -> Option<&'static LlvmBackend> {
    static BE: OnceLock<Option<LlvmBackend>> = OnceLock::new();
    BE.get_or_init(|| match LlvmBackend::create(false) {
        Ok(b) => Some(b.strict()),
        Err(reason) => {
            eprintln!("LLVM backend tests SKIPPED: {reason}");
            None
        }
    })
    .as_ref()
}

/// Backends covering the code generator's choices (see `CraneliftBackend::with_settings`).
pub fn variant_backends() -> &'static [(String, CraneliftBackend)] {
    static BE: OnceLock<Vec<(String, CraneliftBackend)>> = OnceLock::new();
    BE.get_or_init(|| {
        let sets: &[&[(&str, &str)]] = &[
            &[],
            &[("kiln_unroll", "1")],
            &[("kiln_unroll", "2"), ("kiln_interleave", "1")],
            &[("kiln_unroll", "3"), ("kiln_const_cache", "3")],
            &[
                ("kiln_unroll", "4"),
                ("kiln_interleave", "2"),
                ("kiln_schedule", "false"),
            ],
            &[
                ("kiln_unroll", "8"),
                ("kiln_const_cache", "1"),
                ("kiln_affine", "false"),
            ],
            &[("opt_level", "speed")],
            &[("opt_level", "speed"), ("kiln_unroll", "2")],
            &[
                ("has_avx", "false"),
                ("has_avx2", "false"),
                ("has_fma", "false"),
                ("kiln_unroll", "4"),
            ],
            &[
                ("has_sse41", "false"),
                ("has_avx", "false"),
                ("has_avx2", "false"),
                ("has_fma", "false"),
            ],
        ];
        sets.iter()
            .map(|s| {
                let mut s = s.to_vec();
                s.push(("enable_verifier", "true"));
                let name = format!("{s:?}");
                let be = CraneliftBackend::with_settings(&s)
                    .unwrap_or_else(|e| panic!("backend {name}: {e}"));
                (name, be)
            })
            .collect()
    })
}
