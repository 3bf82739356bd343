//! `Traverse`: how a frozen function sees its inputs and outputs.
//!
//! A traversal walks a value in a fixed order and produces two things: a *layout key* (the
//! structure, element types, plain scalar values, which arrays are literals and which have size
//! 0 or 1) and the list of arrays it met, deduplicated (the same array twice is one slot). Two calls
//! with equal keys can share a recording; the arrays are what a replay binds to the recorded
//! kernels. `traverse_mut` visits the arrays in the same order and replaces them, which is how a
//! replay hands results back into `&mut` arguments and into the returned value.

use crate::ad::AdIndex;
use crate::array::Array;
use crate::vector::Vector;
use kiln_core::{Scalar, VarId, VarType};
use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use xxhash_rust::xxh3::Xxh3;

/// A value a frozen function can take or return: arrays, `Vector`, tuples, `Vec`, `[T; N]`,
/// `Option`, maps with string keys, plain scalars and strings, and structs with
/// `#[derive(Traverse)]`.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::Traverse;
///
/// #[derive(Traverse)]
/// struct Scene {
///     weights: Float32,
///     spp: u32,                     // part of the key: a new value records anew
///     #[traverse(skip)]
///     name: String,                 // not part of the frozen state
/// }
///
/// let scene = Scene { weights: Float32::ones(4), spp: 2, name: "demo".into() };
/// let mut t = kiln::freeze::Traversal::new();
/// scene.traverse(&mut t);
/// assert_eq!(t.len(), 1);          // one array
/// ```
pub trait Traverse {
    /// Describe the structure into `t` and list the arrays, in a fixed order.
    fn traverse(&self, t: &mut Traversal);
    /// Replace each array, in the order `traverse` lists them, by the next one from `a`.
    fn traverse_mut(&mut self, a: &mut Assign);
}

/// One step of a path to an input (`scene.weights[3]`), kept only when paths are asked for.
#[derive(Clone, Debug)]
enum Seg {
    Field(&'static str),
    Index(usize),
    Key(String),
}

/// What a traversal found at one array position.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    pub id: VarId,
    /// Slot after deduplication.
    pub slot: u32,
    /// The AD node the handle carries (0: none); not part of the key (see `crate::ad::jax`).
    pub ad: AdIndex,
}

/// The result of traversing inputs: layout key, arrays by position, deduplicated slots.
///
/// Built by [`Traverse::traverse`]; the methods below are what implementations (and the derive)
/// call.
pub struct Traversal {
    hasher: Xxh3,
    /// The key without the arrays' literal and size classes (what a `&mut` argument may not change).
    shape: Xxh3,
    pub(crate) found: Vec<Found>,
    /// Deduplicated variables, in order of first appearance.
    pub(crate) slots: Vec<VarId>,
    track_paths: bool,
    path: Vec<Seg>,
    pub(crate) paths: Vec<String>,
    /// With paths: each plain value, string and structure visited (path, what it was), so that a
    /// new layout can be explained (see `explain`).
    /// (path, what it was, whether it is a plain value rather than a structure or a string).
    pub(crate) plain: Vec<(String, String, bool)>,
}

impl Default for Traversal {
    fn default() -> Self {
        Self::new()
    }
}

impl Traversal {
    /// An empty traversal.
    pub fn new() -> Traversal {
        Traversal {
            hasher: Xxh3::new(),
            shape: Xxh3::new(),
            found: Vec::new(),
            slots: Vec::new(),
            track_paths: false,
            path: Vec::new(),
            paths: Vec::new(),
            plain: Vec::new(),
        }
    }
    /// An empty traversal that also records each array's path (for messages).
    pub(crate) fn with_paths() -> Traversal {
        Traversal {
            track_paths: true,
            ..Traversal::new()
        }
    }
    /// Number of array positions visited (duplicates counted).
    pub fn len(&self) -> usize {
        self.found.len()
    }
    /// Whether no array was visited.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }
    /// The layout key so far.
    pub fn key(&self) -> u64 {
        self.hasher.digest()
    }

    /// The key's structure alone: plain values and layout, not what the arrays hold.
    pub(crate) fn shape_key(&self) -> u64 {
        self.shape.digest()
    }

    /// Mix a tag word into the key.
    fn word(&mut self, w: u64) {
        self.hasher.write_u64(w);
        self.shape.write_u64(w);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.hasher.write(b);
        self.shape.write(b);
    }

    /// An array (its element type and literal/size classes enter the key; see `classify`). An
    /// implementation for a type holding a kiln array should call the array's own `traverse`
    /// instead, which also keeps its AD node (gradient-aware code such as `kiln::grad` sees it).
    pub fn array(&mut self, id: VarId) {
        self.array_ad(id, 0)
    }

    /// An array that carries AD node `ad` (0: none).
    pub(crate) fn array_ad(&mut self, id: VarId, ad: AdIndex) {
        let slot = match self.slots.iter().position(|&s| s == id) {
            Some(s) => {
                // the same array again: the key says which slot, not its contents
                self.hasher.write_u64(0xD0 ^ ((s as u64) << 8));
                self.shape.write_u64(0xA0);
                s as u32
            }
            None => {
                let (ty, class) = classify(id);
                self.hasher
                    .write_u64(0xA0 ^ ((ty as u64) << 8) ^ ((class as u64) << 16));
                self.shape.write_u64(0xA0);
                self.slots.push(id);
                (self.slots.len() - 1) as u32
            }
        };
        self.found.push(Found { id, slot, ad });
        if self.track_paths {
            self.paths.push(self.path_string());
        }
    }
    /// A plain value that becomes part of the key (a new value means a new recording).
    pub fn scalar(&mut self, type_tag: &'static str, bits: u64) {
        self.bytes(type_tag.as_bytes());
        self.word(bits);
        if self.track_paths {
            let what = format!("the {type_tag} {}", fmt_plain(type_tag, bits));
            self.plain.push((self.path_string(), what, true));
        }
    }
    /// A string that becomes part of the key.
    pub fn str(&mut self, s: &str) {
        self.word(0x57 ^ ((s.len() as u64) << 8));
        self.bytes(s.as_bytes());
        if self.track_paths {
            self.plain
                .push((self.path_string(), format!("the string {s:?}"), false));
        }
    }
    /// The start of a struct, enum variant or container: its name and element count.
    pub fn structure(&mut self, name: &'static str, len: usize) {
        self.bytes(name.as_bytes());
        self.word(0x5E ^ ((len as u64) << 8));
        if self.track_paths {
            let what = format!("a {name} of {len} element(s)");
            self.plain.push((self.path_string(), what, false));
        }
    }
    /// Visit a named field.
    pub fn field(&mut self, name: &'static str, f: impl FnOnce(&mut Traversal)) {
        if self.track_paths {
            self.path.push(Seg::Field(name));
        }
        f(self);
        if self.track_paths {
            self.path.pop();
        }
    }
    /// Visit the element at `i` of a sequence.
    pub fn index(&mut self, i: usize, f: impl FnOnce(&mut Traversal)) {
        if self.track_paths {
            self.path.push(Seg::Index(i));
        }
        f(self);
        if self.track_paths {
            self.path.pop();
        }
    }
    /// Visit the entry at `key` of a map (the key is part of the layout).
    pub fn entry(&mut self, key: &str, f: impl FnOnce(&mut Traversal)) {
        self.str(key);
        if self.track_paths {
            self.path.push(Seg::Key(key.to_string()));
        }
        f(self);
        if self.track_paths {
            self.path.pop();
        }
    }
    /// Visit a whole argument (paths start with `argN`).
    pub(crate) fn argument(&mut self, name: &'static str, f: impl FnOnce(&mut Traversal)) {
        self.word(0xA7);
        self.field(name, f)
    }

    fn path_string(&self) -> String {
        let mut s = String::new();
        for seg in &self.path {
            match seg {
                Seg::Field(n) => {
                    if !s.is_empty() {
                        s.push('.');
                    }
                    s.push_str(n)
                }
                Seg::Index(i) => s.push_str(&format!("[{i}]")),
                Seg::Key(k) => s.push_str(&format!("[{k:?}]")),
            }
        }
        s
    }
}

/// A plain value from its type tag and key bits, as Rust prints it.
fn fmt_plain(tag: &str, bits: u64) -> String {
    match tag {
        "f32" => format!("{:?}", f32::from_bits(bits as u32)),
        "f64" => format!("{:?}", f64::from_bits(bits)),
        "i8" | "i16" | "i32" | "i64" | "isize" => (bits as i64).to_string(),
        "bool" => (bits != 0).to_string(),
        "char" => char::from_u32(bits as u32).map_or(bits.to_string(), |c| format!("{c:?}")),
        _ => bits.to_string(),
    }
}

/// How an input array enters the key: literal or not, and whether its size is 0 or 1 (broadcasting
/// and empty arrays are decided at trace time, so they are part of the layout; other sizes are not).
fn classify(id: VarId) -> (VarType, u8) {
    let (ty, size, literal) = kiln_core::freeze::input_class(id);
    let size_class = match size {
        0 => 0u8,
        1 => 1,
        _ => 2,
    };
    (ty, size_class | (u8::from(literal) << 2))
}

/// Hands out replacement arrays, one per position, in traversal order.
pub struct Assign {
    ids: Vec<VarId>,
    /// The AD node of each position (empty: every array is handed out without one).
    ads: Vec<AdIndex>,
    next: usize,
    placeholders: bool,
}

impl Assign {
    /// Positions are filled from `ids`; each handed-out id gets its own reference.
    pub(crate) fn new(ids: Vec<VarId>) -> Assign {
        Assign {
            ids,
            ads: Vec::new(),
            next: 0,
            placeholders: false,
        }
    }
    /// As [`Assign::new`], each array also getting the AD node at its position in `ads` (a new
    /// reference; 0: none).
    pub(crate) fn with_ads(ids: Vec<VarId>, ads: Vec<crate::ad::AdIndex>) -> Assign {
        Assign {
            ads,
            ..Assign::new(ids)
        }
    }
    /// Positions are filled from `(id, ad)` pairs: each handed-out array gets its own reference
    /// to both (gradient-aware rebuilding, see `crate::ad::jax`).
    pub(crate) fn with_ad(pairs: &[(VarId, AdIndex)]) -> Assign {
        Assign {
            ids: pairs.iter().map(|p| p.0).collect(),
            ads: pairs.iter().map(|p| p.1).collect(),
            next: 0,
            placeholders: false,
        }
    }
    /// How many positions were filled so far.
    pub(crate) fn used(&self) -> usize {
        self.next
    }
    /// Every position gets an empty array (templates of a recording's outputs hold no memory).
    pub(crate) fn placeholders() -> Assign {
        Assign {
            ids: Vec::new(),
            ads: Vec::new(),
            next: 0,
            placeholders: true,
        }
    }
    /// The next array as a new reference to a variable of type `ty` (for type-erased holders).
    pub(crate) fn erased(&mut self, ty: kiln_core::VarType) -> VarId {
        if self.placeholders {
            self.next += 1;
            return kiln_core::literal(ty, 0, 0);
        }
        let id = *self
            .ids
            .get(self.next)
            .expect("kiln internal error: a replay assigned more arrays than were recorded");
        self.next += 1;
        kiln_core::inc_ref(id);
        id
    }
    /// As [`Assign::erased`], with the position's AD node (a new reference; 0: none).
    pub(crate) fn erased_ad(&mut self, ty: kiln_core::VarType) -> (VarId, AdIndex) {
        let ad = self.ads.get(self.next).copied().unwrap_or(0);
        let id = self.erased(ty);
        crate::ad::graph::inc_ref(ad);
        (id, ad)
    }
    /// The next array, as a new handle of element type `T`.
    pub fn array<T: Scalar>(&mut self) -> Array<T> {
        if self.placeholders {
            self.next += 1;
            return Array::from_id(kiln_core::literal(T::TYPE, 0, 0));
        }
        let id = *self
            .ids
            .get(self.next)
            .expect("kiln internal error: a replay assigned more arrays than were recorded");
        let ad = self.ads.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        assert_eq!(
            kiln_core::var_type(id),
            T::TYPE,
            "kiln internal error: a replayed array changed type"
        );
        kiln_core::inc_ref(id);
        crate::ad::graph::inc_ref(ad);
        Array::from_id(id).with_ad(ad)
    }
}

// ---------------------------------------------------------------------------------------------
// Implementations for kiln and std types

impl<T: Scalar> Traverse for Array<T> {
    fn traverse(&self, t: &mut Traversal) {
        t.array_ad(self.id(), self.ad);
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        *self = a.array::<T>();
    }
}

impl<A: Traverse, const N: usize> Traverse for Vector<A, N> {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Vector", N);
        for (i, c) in self.0.iter().enumerate() {
            t.index(i, |t| c.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for c in self.0.iter_mut() {
            c.traverse_mut(a);
        }
    }
}

macro_rules! plain_scalar {
    ($($t:ty),*) => {$(
        impl Traverse for $t {
            fn traverse(&self, t: &mut Traversal) {
                t.scalar(stringify!($t), *self as u64);
            }
            fn traverse_mut(&mut self, _: &mut Assign) {}
        }
    )*};
}
plain_scalar!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, bool, char);

impl Traverse for f32 {
    fn traverse(&self, t: &mut Traversal) {
        t.scalar("f32", self.to_bits() as u64);
    }
    fn traverse_mut(&mut self, _: &mut Assign) {}
}
impl Traverse for f64 {
    fn traverse(&self, t: &mut Traversal) {
        t.scalar("f64", self.to_bits());
    }
    fn traverse_mut(&mut self, _: &mut Assign) {}
}
impl Traverse for String {
    fn traverse(&self, t: &mut Traversal) {
        t.str(self);
    }
    fn traverse_mut(&mut self, _: &mut Assign) {}
}
impl Traverse for &'static str {
    fn traverse(&self, t: &mut Traversal) {
        t.str(self);
    }
    fn traverse_mut(&mut self, _: &mut Assign) {}
}
impl Traverse for () {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("()", 0);
    }
    fn traverse_mut(&mut self, _: &mut Assign) {}
}

impl<T: Traverse> Traverse for Vec<T> {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Vec", self.len());
        for (i, x) in self.iter().enumerate() {
            t.index(i, |t| x.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for x in self.iter_mut() {
            x.traverse_mut(a);
        }
    }
}

impl<T: Traverse, const N: usize> Traverse for [T; N] {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("[T; N]", N);
        for (i, x) in self.iter().enumerate() {
            t.index(i, |t| x.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for x in self.iter_mut() {
            x.traverse_mut(a);
        }
    }
}

impl<T: Traverse> Traverse for Option<T> {
    fn traverse(&self, t: &mut Traversal) {
        match self {
            None => t.structure("None", 0),
            Some(x) => {
                t.structure("Some", 1);
                x.traverse(t);
            }
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        if let Some(x) = self {
            x.traverse_mut(a);
        }
    }
}

impl<T: Traverse + ?Sized> Traverse for Box<T> {
    fn traverse(&self, t: &mut Traversal) {
        (**self).traverse(t)
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        (**self).traverse_mut(a)
    }
}

impl<K: AsRef<str> + Ord, V: Traverse> Traverse for BTreeMap<K, V> {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Map", self.len());
        for (k, v) in self {
            t.entry(k.as_ref(), |t| v.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for v in self.values_mut() {
            v.traverse_mut(a);
        }
    }
}

/// Maps are visited in key order, so the layout does not depend on hashing.
impl<K: AsRef<str> + Ord + std::hash::Hash + Eq, V: Traverse, S: std::hash::BuildHasher> Traverse
    for HashMap<K, V, S>
{
    fn traverse(&self, t: &mut Traversal) {
        t.structure("Map", self.len());
        let mut entries: Vec<(&K, &V)> = self.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in entries {
            t.entry(k.as_ref(), |t| v.traverse(t));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        let mut entries: Vec<(&K, &mut V)> = self.iter_mut().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        for (_, v) in entries {
            v.traverse_mut(a);
        }
    }
}

macro_rules! tuple {
    ($n:literal; $($name:ident $idx:tt),+) => {
        impl<$($name: Traverse),+> Traverse for ($($name,)+) {
            fn traverse(&self, t: &mut Traversal) {
                t.structure("tuple", $n);
                $( t.index($idx, |t| self.$idx.traverse(t)); )+
            }
            fn traverse_mut(&mut self, a: &mut Assign) {
                $( self.$idx.traverse_mut(a); )+
            }
        }
    };
}
tuple!(1; A 0);
tuple!(2; A 0, B 1);
tuple!(3; A 0, B 1, C 2);
tuple!(4; A 0, B 1, C 2, D 3);
tuple!(5; A 0, B 1, C 2, D 3, E 4);
tuple!(6; A 0, B 1, C 2, D 3, E 4, F 5);
tuple!(7; A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple!(8; A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
