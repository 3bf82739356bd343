//! An owned, untyped reference to a traced variable: the one handle front ends build on (the typed
//! `Array<T>`, the type-erased values of `scan` and AD, a Python binding). It holds one external
//! reference of the registry and releases it when dropped, so code that builds graphs from raw
//! ids needs no manual `dec_ref` on any path, an error or a panic included.

use crate::registry::{VarId, STATE};
use crate::ty::VarType;

/// One reference to a variable, released when dropped; cloning takes another.
///
/// ```
/// use kiln_core::{Handle, Op, VarType};
/// let before = kiln_core::stats().vars_alive;
/// {
///     let x = Handle::own(kiln_core::counter(VarType::U32, 4).unwrap());
///     let one = Handle::own(kiln_core::literal(VarType::U32, 1, 1));
///     let y = Handle::own(kiln_core::op(Op::Add, &[x.id(), one.id()]).unwrap());
///     assert_eq!(y.ty(), VarType::U32);
///     assert_eq!(y.len(), 4);
///     let bytes = kiln_core::read_bytes(y.id()).unwrap();
///     assert_eq!(&bytes[..4], &1u32.to_le_bytes());
/// }
/// assert_eq!(kiln_core::stats().vars_alive, before);
/// ```
pub struct Handle(VarId);

impl Handle {
    /// Take over one reference the caller holds on `id` (what `op`, `literal`, … return).
    pub fn own(id: VarId) -> Handle {
        Handle(id)
    }
    /// Take a new reference on `id` (the caller keeps its own).
    pub fn borrow(id: VarId) -> Handle {
        crate::inc_ref(id);
        Handle(id)
    }
    /// The variable, for the engine's functions (the reference stays with the handle).
    pub fn id(&self) -> VarId {
        self.0
    }
    /// The variable, for an engine function that replaces it in place (`scatter` makes its target
    /// a new variable and hands this handle that variable's reference).
    pub fn id_mut(&mut self) -> &mut VarId {
        &mut self.0
    }
    /// Give the reference back to the caller, who must release it (`dec_ref`) or hand it on.
    pub fn into_id(self) -> VarId {
        let id = self.0;
        std::mem::forget(self);
        id
    }
    /// The element type.
    pub fn ty(&self) -> VarType {
        STATE.lock().var(self.0 .0).ty
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        STATE.lock().var(self.0 .0).size
    }
    /// Whether the variable has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Clone for Handle {
    fn clone(&self) -> Handle {
        Handle::borrow(self.0)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        crate::dec_ref(self.0);
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handle({})", crate::describe(self.0))
    }
}

/// Several owned references in one list, all released when dropped: for code that passes many
/// variables to the engine at once (whose functions take `&[VarId]`), so the ids stay contiguous
/// and need no copy. The list form of [`Handle`].
///
/// ```
/// use kiln_core::{Handles, VarType};
/// let before = kiln_core::stats().vars_alive;
/// {
///     let mut keep = Handles::new();
///     let a = keep.push(kiln_core::literal(VarType::F32, 1.5f32.to_bits() as u64, 3));
///     keep.push(kiln_core::counter(VarType::U32, 3).unwrap());
///     assert_eq!(keep.ids()[0], a);
///     kiln_core::eval(keep.ids()).unwrap();
/// }
/// assert_eq!(kiln_core::stats().vars_alive, before);
/// ```
#[derive(Default)]
pub struct Handles(Vec<VarId>);

impl Handles {
    /// An empty list.
    pub fn new() -> Handles {
        Handles(Vec::new())
    }
    /// Take over one reference the caller holds on each of `ids`.
    pub fn own(ids: Vec<VarId>) -> Handles {
        Handles(ids)
    }
    /// Take over one reference on `id` until the list is dropped; returns `id`.
    pub fn push(&mut self, id: VarId) -> VarId {
        self.0.push(id);
        id
    }
    /// Take over one reference on each of `ids`.
    pub fn extend(&mut self, ids: impl IntoIterator<Item = VarId>) {
        self.0.extend(ids);
    }
    /// The variables, for the engine's functions (the references stay with the list).
    pub fn ids(&self) -> &[VarId] {
        &self.0
    }
    /// The variables, for engine functions that replace them in place.
    pub fn ids_mut(&mut self) -> &mut [VarId] {
        &mut self.0
    }
    /// Give the references back to the caller, who must release or hand them on.
    pub fn into_ids(mut self) -> Vec<VarId> {
        std::mem::take(&mut self.0)
    }
    /// Hold `id` (a reference the caller hands over) at position `k` instead, releasing the
    /// reference held there. Panics if `k` is out of range (having released `id`).
    ///
    /// ```
    /// use kiln_core::{literal, Handles, VarType};
    /// let before = kiln_core::stats().vars_alive;
    /// {
    ///     let mut list = Handles::own(vec![literal(VarType::F32, 1f32.to_bits() as u64, 4)]);
    ///     let copy = list.clone(); // a new reference on each
    ///     list.replace(0, literal(VarType::F32, 2f32.to_bits() as u64, 4));
    ///     assert_ne!(list.ids()[0], copy.ids()[0]);
    /// }
    /// assert_eq!(kiln_core::stats().vars_alive, before);
    /// ```
    pub fn replace(&mut self, k: usize, id: VarId) {
        let Some(slot) = self.0.get_mut(k) else {
            crate::dec_ref(id);
            panic!(
                "kiln: Handles::replace at {k}, past the {} held",
                self.0.len()
            );
        };
        crate::dec_ref(std::mem::replace(slot, id));
    }
    /// The number of references held.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether no reference is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Clone for Handles {
    /// The same variables, with a new reference on each.
    fn clone(&self) -> Handles {
        for &id in &self.0 {
            crate::inc_ref(id);
        }
        Handles(self.0.clone())
    }
}

impl Drop for Handles {
    fn drop(&mut self) {
        for &id in &self.0 {
            crate::dec_ref(id);
        }
    }
}
