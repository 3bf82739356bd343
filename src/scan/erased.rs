//! Type-erased tensors for the scan machinery: a scan mixes element types (an integer sequence,
//! float outputs), so inside it every value is a variable id, its type and its shape. Also the
//! `Tree` trait that flattens the JAX face's carries, inputs and outputs into such lists.

use crate::array::Array;
use crate::freeze::traverse::{Assign, Traversal, Traverse};
use crate::tensor::Tensor;
use kiln_core::{Error, Handle, Result, Scalar, VarId, VarType};

/// One reference to a variable, with its type and shape (kiln's own; not nameable outside), and
/// its AD node when it carries a gradient (so that a scan run differentiated step by step hands
/// its body tensors that still carry theirs).
pub struct Erased {
    pub(crate) h: Handle,
    pub(crate) ty: VarType,
    pub(crate) shape: Vec<usize>,
    /// One reference to the AD node (0: none).
    ad: crate::ad::AdIndex,
}

impl Clone for Erased {
    fn clone(&self) -> Self {
        crate::ad::graph::inc_ref(self.ad);
        Erased {
            h: self.h.clone(),
            ty: self.ty,
            shape: self.shape.clone(),
            ad: self.ad,
        }
    }
}

impl Drop for Erased {
    fn drop(&mut self) {
        crate::ad::graph::dec_ref(self.ad);
    }
}

impl Erased {
    /// Take over one reference of `id`.
    pub fn own(id: VarId, shape: Vec<usize>) -> Erased {
        Erased {
            h: Handle::own(id),
            ty: kiln_core::var_type(id),
            shape,
            ad: 0,
        }
    }
    /// The variable (the reference stays with this value).
    pub fn id(&self) -> VarId {
        self.h.id()
    }
    /// A new reference to `id`.
    pub fn borrow(id: VarId, shape: Vec<usize>) -> Erased {
        Erased {
            h: Handle::borrow(id),
            ty: kiln_core::var_type(id),
            shape,
            ad: 0,
        }
    }
    /// `t`, with its AD node when it carries a gradient and derivatives are being recorded.
    pub fn of<T: Scalar>(t: &Tensor<T>) -> Erased {
        let mut e = Erased::borrow(t.array().id(), t.shape().to_vec());
        if crate::ad::rules::tracks(t.array()) {
            crate::ad::graph::inc_ref(t.array().ad);
            e.ad = t.array().ad;
        }
        e
    }
    /// A new reference to `id` with AD node `ad`, whose reference the value takes over.
    pub(crate) fn with_node(id: VarId, shape: Vec<usize>, ad: crate::ad::AdIndex) -> Erased {
        let mut e = Erased::borrow(id, shape);
        e.ad = ad;
        e
    }
    /// Its AD node (0: none).
    pub(crate) fn ad(&self) -> crate::ad::AdIndex {
        self.ad
    }
    /// Whether it carries a gradient.
    pub fn carries_grad(&self) -> bool {
        self.ad != 0
    }
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// The tensor, or an error naming `what` when its element type is not `T`.
    pub fn tensor<T: Scalar>(&self, what: &dyn Fn() -> String) -> Result<Tensor<T>> {
        if self.ty != T::TYPE {
            return Err(Error::Scan(format!(
                "{} holds {} elements but was read as {}; use the `_as::<{}>` accessor or cast it",
                what(),
                self.ty,
                T::TYPE,
                self.ty.name()
            )));
        }
        let mut a = Array::<T>::from_id(self.h.clone().into_id());
        if self.ad != 0 {
            crate::ad::graph::inc_ref(self.ad);
            a = a.with_ad(self.ad);
        }
        Tensor::try_from_array(a, &self.shape)
    }
    /// `shape` and type for messages: `f32 [3, 4]`.
    pub fn describe(&self) -> String {
        format!("{} {:?}", self.ty, self.shape)
    }
}

/// A list of erased arrays that frozen functions can take and return.
#[derive(Clone, Default)]
pub(crate) struct Arrays(pub Vec<Erased>);

impl Traverse for Arrays {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("ScanArrays", self.0.len());
        for (i, e) in self.0.iter().enumerate() {
            t.index(i, |t| {
                for &d in &e.shape {
                    t.scalar("dim", d as u64);
                }
                t.array(e.id())
            });
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for e in &mut self.0 {
            // (the old variable's reference goes with the old handle)
            e.h = Handle::own(a.erased(e.ty));
            crate::ad::graph::dec_ref(std::mem::replace(&mut e.ad, 0));
        }
    }
}

/// A list of erased arrays with their AD nodes: the state of a loop that carries gradients
/// (the JAX face's one-kernel differentiated scan).
#[derive(Clone, Default)]
pub(crate) struct Tracked(pub Vec<Erased>);

impl Traverse for Tracked {
    fn traverse(&self, t: &mut Traversal) {
        t.structure("ScanCarry", self.0.len());
        for (i, e) in self.0.iter().enumerate() {
            t.index(i, |t| t.array_ad(e.id(), e.ad));
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        for e in &mut self.0 {
            let (id, ad) = a.erased_ad(e.ty);
            e.h = Handle::own(id);
            crate::ad::graph::dec_ref(std::mem::replace(&mut e.ad, ad));
        }
    }
}

/// Values the JAX face flattens: a tensor, `()`, tuples and vectors of them.
///
/// ```
/// use kiln::prelude::*;
/// use kiln::scan::Tree;
/// let pair = (Tensor::<f32>::zeros(&[2]), Tensor::<u32>::zeros(&[3]));
/// assert_eq!(pair.count(), 2);
/// ```
pub trait Tree: Sized {
    /// How many tensors it holds.
    fn count(&self) -> usize {
        let mut v = Vec::new();
        self.flatten(&mut v);
        v.len()
    }
    #[doc(hidden)]
    fn flatten(&self, out: &mut Vec<Erased>);
    /// Whether a tensor in it carries a gradient (`kiln::scan` then runs differentiated, step by
    /// step; PyTensor's face refuses it).
    #[doc(hidden)]
    fn carries_grad(&self) -> bool {
        false
    }
    /// `self`'s structure with the tensors replaced, in `flatten` order (types are checked).
    #[doc(hidden)]
    fn rebuild(&self, leaves: &mut std::vec::IntoIter<Erased>, path: &str) -> Result<Self>;
    /// Trees of one structure with each tensor stacked along a new leading axis (gradients
    /// kept). `parts` is not empty.
    #[doc(hidden)]
    fn stack(parts: Vec<Self>) -> Self;
}

impl<T: Scalar> Tree for Tensor<T> {
    fn flatten(&self, out: &mut Vec<Erased>) {
        out.push(Erased::of(self));
    }
    fn carries_grad(&self) -> bool {
        self.array().ad != 0
    }
    fn rebuild(&self, leaves: &mut std::vec::IntoIter<Erased>, path: &str) -> Result<Self> {
        let e = leaves.next().ok_or_else(|| {
            Error::Scan(format!("kiln internal error: no tensor left for {path}"))
        })?;
        e.tensor::<T>(&|| path.to_string())
    }
    fn stack(parts: Vec<Self>) -> Self {
        super::rows::stack(parts)
    }
}

impl Tree for () {
    fn flatten(&self, _: &mut Vec<Erased>) {}
    fn rebuild(&self, _: &mut std::vec::IntoIter<Erased>, _: &str) -> Result<Self> {
        Ok(())
    }
    fn stack(_: Vec<Self>) -> Self {}
}

impl<A: Tree> Tree for Vec<A> {
    fn flatten(&self, out: &mut Vec<Erased>) {
        self.iter().for_each(|a| a.flatten(out));
    }
    fn carries_grad(&self) -> bool {
        self.iter().any(|a| a.carries_grad())
    }
    fn rebuild(&self, leaves: &mut std::vec::IntoIter<Erased>, path: &str) -> Result<Self> {
        self.iter()
            .enumerate()
            .map(|(i, a)| a.rebuild(leaves, &format!("{path}[{i}]")))
            .collect()
    }
    fn stack(parts: Vec<Self>) -> Self {
        let width = parts.first().map_or(0, Vec::len);
        let mut columns: Vec<Vec<A>> = (0..width).map(|_| Vec::new()).collect();
        for p in parts {
            for (c, a) in columns.iter_mut().zip(p) {
                c.push(a);
            }
        }
        columns.into_iter().map(A::stack).collect()
    }
}

macro_rules! tree_tuple {
    ($($n:ident $i:tt),+) => {
        impl<$($n: Tree),+> Tree for ($($n,)+) {
            fn flatten(&self, out: &mut Vec<Erased>) {
                $(self.$i.flatten(out);)+
            }
            fn carries_grad(&self) -> bool {
                false $(|| self.$i.carries_grad())+
            }
            fn rebuild(&self, leaves: &mut std::vec::IntoIter<Erased>, path: &str) -> Result<Self> {
                Ok(($(self.$i.rebuild(leaves, &format!("{path}.{}", $i))?,)+))
            }
            #[allow(non_snake_case)]
            fn stack(parts: Vec<Self>) -> Self {
                $(let mut $n = Vec::with_capacity(parts.len());)+
                for p in parts {
                    $($n.push(p.$i);)+
                }
                ($(<$n as Tree>::stack($n),)+)
            }
        }
    };
}
tree_tuple!(A 0);
tree_tuple!(A 0, B 1);
tree_tuple!(A 0, B 1, C 2);
tree_tuple!(A 0, B 1, C 2, D 3);
tree_tuple!(A 0, B 1, C 2, D 3, E 4);
tree_tuple!(A 0, B 1, C 2, D 3, E 4, F 5);

pub(crate) fn flatten<X: Tree>(x: &X) -> Vec<Erased> {
    let mut v = Vec::new();
    x.flatten(&mut v);
    v
}
