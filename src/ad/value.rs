//! `Grad`: an owned, untyped array handle (engine id plus AD node) for the parts of the AD layer
//! that hold arrays of different element types side by side (a node's gradient, the cotangents
//! of a backward pass), with checked conversions to and from `Array<T>`.

use super::graph::{self, AdIndex};
use crate::array::Array;
use kiln_core::{Handle, Scalar, VarId, VarType};

/// An owned handle to an array of any element type, possibly with an AD node.
pub(crate) struct Grad {
    id: Handle,
    ad: AdIndex,
}

impl Grad {
    pub fn of<T: Scalar>(a: Array<T>) -> Grad {
        let ad = a.ad;
        let id = a.id();
        std::mem::forget(a);
        Grad::own(id, ad)
    }
    /// A handle taking over one reference to `id` and one to `ad` that the caller holds.
    pub fn own(id: VarId, ad: AdIndex) -> Grad {
        Grad {
            id: Handle::own(id),
            ad,
        }
    }
    /// A handle with new references to `id` and `ad`.
    pub fn share(id: VarId, ad: AdIndex) -> Grad {
        graph::inc_ref(ad);
        Grad {
            id: Handle::borrow(id),
            ad,
        }
    }
    /// A typed handle sharing this one's references. Panics on a type mismatch (an AD rule bug).
    pub fn array<T: Scalar>(&self) -> Array<T> {
        assert_eq!(
            self.ty(),
            T::TYPE,
            "kiln: AD rule got a gradient of the wrong type"
        );
        graph::inc_ref(self.ad);
        Array::wrap(self.id.clone().into_id()).with_ad(self.ad)
    }
    pub fn id(&self) -> VarId {
        self.id.id()
    }
    pub fn ad(&self) -> AdIndex {
        self.ad
    }
    pub fn ty(&self) -> VarType {
        kiln_core::var_type(self.id.id())
    }
    /// `self + b`, two gradients of one float type.
    pub fn plus(self, b: &Grad) -> Grad {
        match self.ty() {
            VarType::F32 => Grad::of(self.array::<f32>() + b.array::<f32>()),
            _ => Grad::of(self.array::<f64>() + b.array::<f64>()),
        }
    }
    /// The same values with node `ad` (whose reference the result takes over) in place of
    /// this one's.
    pub fn with_node(&self, ad: AdIndex) -> Grad {
        kiln_core::inc_ref(self.id());
        Grad::own(self.id(), ad)
    }
    /// The same values without the AD node.
    pub fn detached(&self) -> Grad {
        Grad {
            id: self.id.clone(),
            ad: 0,
        }
    }
}

impl Clone for Grad {
    fn clone(&self) -> Self {
        graph::inc_ref(self.ad);
        Grad {
            id: self.id.clone(),
            ad: self.ad,
        }
    }
}

impl Drop for Grad {
    fn drop(&mut self) {
        // (the engine reference goes with `id`)
        graph::dec_ref(self.ad);
    }
}
