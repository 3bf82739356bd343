//! Why a frozen function recorded again: what each layout key was made of, and how a new key
//! differs from the ones recorded before.
//!
//! A call whose layout key has no recording yet is traced and recorded. The key hashes the
//! arguments' structure, their plain values and, per array, its type, whether it is a literal and
//! whether it has 0, 1 or more elements; a hash cannot say which of these changed. So each recorded
//! key keeps a [`Layout`] (paths and classes, computed only on recording calls), and a new key is
//! compared with the closest one: the difference, with the fix where there is one, is what
//! `FreezeStats::retraces` lists for the recording.

use super::traverse::{Traversal, Traverse};
use super::ArgList;
use kiln_core::VarType;

/// One array position of a layout.
struct Pos {
    path: String,
    ty: VarType,
    size: usize,
    /// The literal's bits (a literal is baked into a recording), or `None` for an array in memory.
    literal: Option<u64>,
    /// Deduplicated slot: positions sharing a slot were the same array.
    slot: u32,
    /// Whether it tracked derivatives (which `&mut` positions carry gradients is in the key).
    tracked: bool,
}

/// What a layout key was made of.
pub(crate) struct Layout {
    /// Order of recording (a tie between recorded layouts names the latest).
    pub(crate) seq: usize,
    arrays: Vec<Pos>,
    /// Plain values, strings and structures, with their paths (and whether each is a value).
    plain: Vec<(String, String, bool)>,
}

impl Layout {
    /// The layout of `args` (and the extra state), as the key saw it.
    pub(crate) fn of<A: ArgList>(args: &A, extra: Option<&dyn Traverse>) -> Layout {
        let mut t = Traversal::with_paths();
        args.traverse_all(&mut t);
        if let Some(s) = extra {
            t.argument("state", |t| s.traverse(t));
        }
        let arrays = t
            .found
            .iter()
            .zip(&t.paths)
            .map(|(f, path)| {
                let (ty, size, is_literal) = kiln_core::freeze::input_class(f.id);
                Pos {
                    path: path.clone(),
                    ty,
                    size,
                    literal: if is_literal {
                        kiln_core::literal_value(f.id)
                    } else {
                        None
                    },
                    slot: f.slot,
                    tracked: f.ad != 0,
                }
            })
            .collect();
        Layout {
            seq: 0,
            arrays,
            plain: std::mem::take(&mut t.plain),
        }
    }

    /// How `self` (a new key) differs from `old`, one sentence per difference with its fix.
    fn differences(&self, old: &Layout) -> Vec<String> {
        let mut out = Vec::new();
        let same_plain_paths = self.plain.len() == old.plain.len()
            && self.plain.iter().zip(&old.plain).all(|(a, b)| a.0 == b.0);
        if same_plain_paths {
            for ((path, now, value), (_, was, _)) in self.plain.iter().zip(&old.plain) {
                if now == was {
                    continue;
                }
                out.push(if *value {
                    format!(
                        "`{}` is {now} now but was {was}: plain values are part of the key, so each new value records anew; pass it as an array (e.g. `UInt32::opaque(v)`) to replay for every value",
                        name(path)
                    )
                } else {
                    format!(
                        "`{}` is {now} now but was {was} when recorded: the arguments' structure is part of the key, so each structure records once",
                        name(path)
                    )
                });
            }
        }
        if !same_plain_paths || self.arrays.len() != old.arrays.len() {
            if out.is_empty() {
                out.push(format!(
                    "the arguments' structure changed ({} array(s) and {} plain item(s) now, {} and {} when recorded): each structure records once",
                    self.arrays.len(),
                    self.plain.len(),
                    old.arrays.len(),
                    old.plain.len()
                ));
            }
            return out;
        }
        // literals that are arrays now (the common case: weights made with `scalar`), in one line
        let mut became_arrays: Vec<String> = Vec::new();
        let mut ty_of_literals = VarType::F32;
        // [stopped, started] tracking derivatives since the recording
        let mut tracking: [Vec<String>; 2] = [Vec::new(), Vec::new()];
        for (a, b) in self.arrays.iter().zip(&old.arrays) {
            let path = name(&a.path);
            if a.ty != b.ty {
                out.push(format!(
                    "`{path}` has type {} now, {} when recorded (a new input type records anew)",
                    a.ty, b.ty
                ));
                continue;
            }
            match (a.literal, b.literal) {
                (None, Some(was)) => {
                    became_arrays.push(format!("`{path}` (the literal {})", show(b.ty, was)));
                    ty_of_literals = b.ty;
                }
                (Some(now), None) => out.push(format!(
                    "`{path}` is the literal {} now (literals are baked into a recording) but was an evaluated array when recorded; create it with `{}::opaque(..)` or pass `kiln::make_opaque(&x)`",
                    show(a.ty, now),
                    array_name(a.ty)
                )),
                _ => {}
            }
            if a.tracked != b.tracked {
                tracking[usize::from(a.tracked)].push(format!("`{path}`"));
            }
            if class(a.size) != class(b.size) {
                out.push(format!(
                    "`{path}` has {} element(s) now, {} when recorded: empty, one-element (broadcast) and larger arrays trace differently, so each records once",
                    a.size, b.size
                ));
            }
        }
        if !became_arrays.is_empty() {
            out.insert(
                0,
                format!(
                    "{} {} literal(s) when recorded (a literal such as `{}::scalar(..)` is baked into the recording) and evaluated array(s) now; create them with `{}::opaque(..)` or pass `kiln::make_opaque(&x)` from the first call on, so that one recording serves every call",
                    became_arrays.join(", "),
                    if became_arrays.len() == 1 { "was a" } else { "were" },
                    array_name(ty_of_literals),
                    array_name(ty_of_literals)
                ),
            );
        }
        for (started, paths) in tracking.iter().enumerate().rev() {
            if !paths.is_empty() {
                out.push(format!(
                    "{} {} derivatives now but {} when recorded (a call that enabled gradients inside, or detached them, leaves its arguments so): which arguments carry gradients is part of the key, so each case records once",
                    paths.join(", "),
                    if started == 1 { "track" } else { "do not track" },
                    if started == 1 { "did not" } else { "did" }
                ));
            }
        }
        // which positions were the same array (literals of one value are always one variable:
        // their sharing says nothing)
        let literal =
            |i: usize| self.arrays[i].literal.is_some() || old.arrays[i].literal.is_some();
        for (i, a) in self.arrays.iter().enumerate() {
            if literal(i) {
                continue;
            }
            let first_now = self.arrays.iter().position(|x| x.slot == a.slot);
            let first_was = old.arrays.iter().position(|x| x.slot == old.arrays[i].slot);
            if first_now != first_was {
                let (now, was) = (first_now.unwrap_or(i), first_was.unwrap_or(i));
                if literal(now) || literal(was) {
                    continue;
                }
                out.push(if now != i {
                    format!(
                        "`{}` is the same array as `{}` now but was not when recorded (aliasing is part of the key)",
                        name(&a.path),
                        name(&self.arrays[now].path)
                    )
                } else {
                    format!(
                        "`{}` was the same array as `{}` when recorded but is not now (aliasing is part of the key)",
                        name(&a.path),
                        name(&old.arrays[was].path)
                    )
                });
            }
        }
        out
    }

    /// Why a call with this (new) layout records, given the layouts recorded before (`None`: it
    /// is the first recording).
    pub(crate) fn explain<'a>(
        &self,
        recorded: impl Iterator<Item = &'a Layout>,
        cleared: bool,
    ) -> Option<String> {
        let closest = recorded
            .map(|old| (self.differences(old), old.seq))
            .min_by_key(|(d, seq)| {
                let n = if d.is_empty() { usize::MAX } else { d.len() };
                (n, std::cmp::Reverse(*seq))
            })
            .map(|(d, _)| d);
        match closest {
            Some(d) if !d.is_empty() => Some(format!("new input layout: {}", d.join("; "))),
            Some(_) => Some("new input layout".into()),
            None if cleared => {
                Some("the earlier recordings were dropped (`clear()`): recorded anew".into())
            }
            None => None,
        }
    }
}

/// The argument path as the user wrote it (`arg0.w[3]`).
fn name(path: &str) -> &str {
    if path.is_empty() {
        "(argument)"
    } else {
        path
    }
}

fn class(size: usize) -> u8 {
    size.min(2) as u8
}

/// A literal's value from its bits, as Rust prints it.
pub(crate) fn show(ty: VarType, bits: u64) -> String {
    match ty {
        VarType::F32 => format!("{:?}", f32::from_bits(bits as u32)),
        VarType::F64 => format!("{:?}", f64::from_bits(bits)),
        VarType::Bool => (bits & 1 != 0).to_string(),
        VarType::I32 => (bits as u32 as i32).to_string(),
        VarType::I64 => (bits as i64).to_string(),
        VarType::U32 | VarType::U64 => bits.to_string(),
    }
}

/// The front end's alias for arrays of `ty` (`Float32`).
fn array_name(ty: VarType) -> &'static str {
    match ty {
        VarType::Bool => "Bool",
        VarType::I32 => "Int32",
        VarType::U32 => "UInt32",
        VarType::I64 => "Int64",
        VarType::U64 => "UInt64",
        VarType::F32 => "Float32",
        VarType::F64 => "Float64",
    }
}
