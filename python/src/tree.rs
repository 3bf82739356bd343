//! Python values as kiln sees them when it records a function (`freeze`, `while_loop`, `if_stmt`,
//! `switch`): a tree whose leaves are arrays (traversed as arrays), numbers and strings (part of
//! the recording's key, like Dr.Jit's), and objects kiln cannot look into (keyed by identity).
//! Tuples, lists, dicts, dataclasses and classes with Dr.Jit's `DRJIT_STRUCT` are looked into.
//!
//! Arrays and structs remember the Python object they came from, so a frozen function's changes
//! to its arguments (`scatter` into one, `state.x = …`) reach the caller's objects on every replay.

use crate::array::{wrap, ArrayBase};
use crate::dynarray::Dyn;
use crate::tensor::{wrap_tensor, TensorBase};
use kiln::freeze::{Assign, Traversal, Traverse};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyWeakrefMethods, PyWeakrefReference,
};
use std::collections::HashMap;
use std::sync::Mutex;

/// Objects kiln keys by identity, by address: a weak reference to the object and its serial
/// number. A recording is keyed by the serial, which no later object gets, so the object need
/// not be kept alive (a new object at a freed address gets a new serial and records anew).
static IDENTITIES: Mutex<Option<Identities>> = Mutex::new(None);

#[derive(Default)]
struct Identities {
    by_address: HashMap<usize, (Py<PyWeakrefReference>, u64)>,
    next: u64,
    /// Entries after the last sweep of dead ones.
    swept_at: usize,
}

/// The identity key of `obj`: its serial number (`Ok`), or, for an object without weak
/// references, its address (`Err`): then a recording keyed by it must keep it alive
/// ([`Tree::opaques`]).
fn identity(obj: &Bound<PyAny>) -> Result<u64, u64> {
    let addr = obj.as_ptr() as usize;
    // (made before locking: making a weak reference may run a collection and Python finalizers,
    // which may come back here)
    let Ok(weak) = PyWeakrefReference::new(obj) else {
        return Err(addr as u64);
    };
    let mut guard = IDENTITIES.lock().unwrap_or_else(|p| p.into_inner());
    let ids = guard.get_or_insert_with(Identities::default);
    if let Some((known, serial)) = ids.by_address.get(&addr) {
        if known.bind(obj.py()).upgrade().is_some_and(|o| o.is(obj)) {
            return Ok(*serial);
        }
    }
    if ids.by_address.len() >= 2 * ids.swept_at.max(64) {
        ids.by_address
            .retain(|_, (w, _)| w.bind(obj.py()).upgrade().is_some());
        ids.swept_at = ids.by_address.len();
    }
    ids.next += 1;
    let serial = ids.next;
    ids.by_address.insert(addr, (weak.unbind(), serial));
    Ok(serial)
}

/// One node of a Python value.
pub enum Tree {
    /// An array, and the object it was read from (inputs only).
    Array(Dyn, Option<Py<ArrayBase>>),
    /// A Python number or `None`: its type and bits key the recording; the object goes back as is.
    Scalar(&'static str, u64, Py<PyAny>),
    Str(String),
    /// A tuple or list, and the object it was read from: a list's entries the function rebinds
    /// (`state[0] = ...`) are read back from it and written back into it; `to_py` hands the
    /// function this object while it holds the same entries.
    Seq {
        tuple: bool,
        items: Vec<Tree>,
        source: Option<Py<PyAny>>,
    },
    /// A dict's entries (key, key as text, value), and the dict they were read from (as `Seq`'s).
    Dict(Vec<(Py<PyAny>, String, Tree)>, Option<Py<PyAny>>),
    /// A tensor (flat values and shape), and the object it was read from (inputs only).
    Tensor(Dyn, Vec<usize>, Option<Py<TensorBase>>),
    /// A dataclass or a `DRJIT_STRUCT` class: its fields, and the object.
    Struct(Py<PyAny>, Vec<(String, Tree)>),
    /// A function's closure cells and what they hold (a frozen function's captured values).
    Cells(Vec<(Py<PyAny>, Tree)>),
    /// Anything else: passed through; its type and identity key the recording.
    Opaque(Py<PyAny>),
}

impl Clone for Tree {
    fn clone(&self) -> Tree {
        crate::gil::attach(|py| self.clone_in(py))
    }
}

impl Tree {
    fn clone_in(&self, py: Python<'_>) -> Tree {
        match self {
            Tree::Array(d, o) => Tree::Array(d.clone(), o.as_ref().map(|o| o.clone_ref(py))),
            Tree::Tensor(d, s, o) => {
                Tree::Tensor(d.clone(), s.clone(), o.as_ref().map(|o| o.clone_ref(py)))
            }
            Tree::Cells(c) => Tree::Cells(
                c.iter()
                    .map(|(cell, v)| (cell.clone_ref(py), v.clone_in(py)))
                    .collect(),
            ),
            Tree::Scalar(t, b, o) => Tree::Scalar(t, *b, o.clone_ref(py)),
            Tree::Str(s) => Tree::Str(s.clone()),
            Tree::Seq {
                tuple,
                items,
                source,
            } => Tree::Seq {
                tuple: *tuple,
                items: items.iter().map(|i| i.clone_in(py)).collect(),
                source: source.as_ref().map(|o| o.clone_ref(py)),
            },
            Tree::Dict(e, source) => Tree::Dict(
                e.iter()
                    .map(|(k, s, v)| (k.clone_ref(py), s.clone(), v.clone_in(py)))
                    .collect(),
                source.as_ref().map(|o| o.clone_ref(py)),
            ),
            Tree::Struct(o, f) => Tree::Struct(
                o.clone_ref(py),
                f.iter().map(|(n, v)| (n.clone(), v.clone_in(py))).collect(),
            ),
            Tree::Opaque(o) => Tree::Opaque(o.clone_ref(py)),
        }
    }

    /// Read a Python value.
    pub fn from_py(x: &Bound<PyAny>) -> PyResult<Tree> {
        Tree::read(x, &mut Vec::new())
    }

    /// The closure cells of `func` (none for a callable without them).
    pub fn cells_of(func: &Bound<PyAny>) -> PyResult<Tree> {
        let Ok(closure) = func.getattr(pyo3::intern!(func.py(), "__closure__")) else {
            return Ok(Tree::Cells(Vec::new()));
        };
        if closure.is_none() {
            return Ok(Tree::Cells(Vec::new()));
        }
        let mut cells = Vec::new();
        for cell in closure.try_iter()? {
            let cell = cell?;
            // an empty cell (a name assigned later) holds nothing to traverse
            let Ok(v) = cell.getattr("cell_contents") else {
                continue;
            };
            let mut t = Tree::from_py(&v)?;
            let mut arrays = Vec::new();
            t.arrays(&mut arrays);
            if arrays.is_empty()
                && matches!(t, Tree::Seq { .. } | Tree::Dict(..) | Tree::Struct(..))
            {
                // a container of plain values (a list the function appends to): by identity, not
                // by content, or every call would record anew
                t = Tree::Opaque(v.unbind());
            }
            cells.push((cell.unbind(), t));
        }
        Ok(Tree::Cells(cells))
    }

    /// Read `x`; `open` holds the containers being read, to refuse one that contains itself.
    fn read(x: &Bound<PyAny>, open: &mut Vec<usize>) -> PyResult<Tree> {
        if let Ok(a) = x.cast::<ArrayBase>() {
            return Ok(Tree::Array(a.borrow().a.clone(), Some(a.clone().unbind())));
        }
        if let Ok(t) = x.cast::<TensorBase>() {
            let b = t.borrow();
            return Ok(Tree::Tensor(
                b.a.clone(),
                b.shape.clone(),
                Some(t.clone().unbind()),
            ));
        }
        // (numbers and strings first: asking their types for struct fields raises and catches
        // two AttributeErrors per number, the cost of a frozen call with scalar arguments)
        let plain = x.is_none()
            || x.is_instance_of::<PyFloat>()
            || x.is_instance_of::<PyInt>()
            || x.is_instance_of::<PyString>();
        let builtin = !plain
            && (x.is_instance_of::<PyTuple>()
                || x.is_instance_of::<PyList>()
                || x.is_instance_of::<PyDict>());
        let fields = if plain || builtin {
            None
        } else {
            struct_fields(x)?
        };
        let container = builtin || fields.is_some();
        let me = x.as_ptr() as usize;
        if container && open.contains(&me) {
            return Err(crate::errors::value_error(format!(
                "an argument contains itself (a `{}` inside itself): kiln cannot traverse a cyclic structure; pass the arrays it holds instead",
                x.get_type().name()?
            )));
        }
        if container {
            open.push(me);
        }
        let r = Tree::read_inner(x, fields, open);
        if container {
            open.pop();
        }
        r
    }

    fn read_inner(
        x: &Bound<PyAny>,
        fields: Option<Vec<String>>,
        open: &mut Vec<usize>,
    ) -> PyResult<Tree> {
        if x.is_none() {
            return Ok(Tree::Scalar("None", 0, x.clone().unbind()));
        }
        if let Ok(b) = x.cast::<PyBool>() {
            return Ok(Tree::Scalar("bool", b.is_true() as u64, x.clone().unbind()));
        }
        if x.cast::<PyInt>().is_ok() {
            let bits = match x.extract::<i64>() {
                Ok(v) => v as u64,
                Err(_) => x.hash()? as u64,
            };
            return Ok(Tree::Scalar("i64", bits, x.clone().unbind()));
        }
        if let Ok(f) = x.cast::<PyFloat>() {
            return Ok(Tree::Scalar("f64", f.value().to_bits(), x.clone().unbind()));
        }
        if let Ok(s) = x.cast::<PyString>() {
            return Ok(Tree::Str(s.to_string()));
        }
        if let Ok(t) = x.cast::<PyTuple>() {
            let items = t
                .iter()
                .map(|i| Tree::read(&i, open))
                .collect::<PyResult<_>>()?;
            return Ok(Tree::Seq {
                tuple: true,
                items,
                source: Some(t.clone().into_any().unbind()),
            });
        }
        if let Ok(l) = x.cast::<PyList>() {
            let items = l
                .iter()
                .map(|i| Tree::read(&i, open))
                .collect::<PyResult<_>>()?;
            return Ok(Tree::Seq {
                tuple: false,
                items,
                source: Some(l.clone().into_any().unbind()),
            });
        }
        if let Ok(d) = x.cast::<PyDict>() {
            let mut e = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                e.push((
                    k.clone().unbind(),
                    k.str()?.to_string(),
                    Tree::read(&v, open)?,
                ));
            }
            return Ok(Tree::Dict(e, Some(d.clone().into_any().unbind())));
        }
        if let Some(names) = fields {
            let mut f = Vec::with_capacity(names.len());
            for n in names {
                let v = x.getattr(n.as_str())?;
                f.push((n, Tree::read(&v, open)?));
            }
            return Ok(Tree::Struct(x.clone().unbind(), f));
        }
        Ok(Tree::Opaque(x.clone().unbind()))
    }

    /// The same value without references to the Python objects its arrays came from (a struct
    /// keeps a copy of its object with those fields detached, as the template `to_py` copies):
    /// for a value kiln keeps, so that it holds the arrays' values and not the caller's objects
    /// (whose AD nodes would stay alive with them).
    pub fn stripped(&self, py: Python<'_>) -> PyResult<Tree> {
        Ok(match self {
            Tree::Array(d, _) => Tree::Array(d.clone(), None),
            Tree::Tensor(d, s, _) => Tree::Tensor(d.clone(), s.clone(), None),
            Tree::Seq { tuple, items, .. } => Tree::Seq {
                tuple: *tuple,
                items: items
                    .iter()
                    .map(|i| i.stripped(py))
                    .collect::<PyResult<_>>()?,
                source: None,
            },
            Tree::Dict(e, _) => Tree::Dict(
                e.iter()
                    .map(|(k, n, v)| Ok((k.clone_ref(py), n.clone(), v.stripped(py)?)))
                    .collect::<PyResult<_>>()?,
                None,
            ),
            Tree::Struct(o, f) => {
                let template = py.import("copy")?.call_method1("copy", (o.bind(py),))?;
                let set = py
                    .import("builtins")?
                    .getattr("object")?
                    .getattr("__setattr__")?;
                // its fields detached (a vector's components must stay arrays)
                let detach = py.import("kiln")?.getattr("detach")?;
                for (n, _) in f {
                    let v = o.bind(py).getattr(n.as_str())?;
                    set.call1((&template, n.as_str(), detach.call1((v,))?))?;
                }
                let fields = f
                    .iter()
                    .map(|(n, v)| Ok((n.clone(), v.stripped(py)?)))
                    .collect::<PyResult<_>>()?;
                Tree::Struct(template.unbind(), fields)
            }
            other => other.clone_in(py),
        })
    }

    /// The Python value. `reuse`: arrays go back into the objects they came from (a function's
    /// own arguments); otherwise every array is a new object and structs are copies.
    pub fn to_py(&self, py: Python<'_>, reuse: bool) -> PyResult<Py<PyAny>> {
        Ok(match self {
            Tree::Array(d, Some(o)) if reuse => {
                o.borrow_mut(py).a = d.clone();
                o.clone_ref(py).into_any()
            }
            Tree::Array(d, _) => wrap(py, d.clone())?,
            Tree::Tensor(d, s, Some(o)) if reuse => {
                let mut b = o.borrow_mut(py);
                b.a = d.clone();
                b.shape = s.clone();
                o.clone_ref(py).into_any()
            }
            Tree::Tensor(d, s, _) => wrap_tensor(py, d.clone(), s.clone())?,
            Tree::Cells(c) => {
                let mut v = Vec::with_capacity(c.len());
                for (cell, t) in c {
                    let now = t.to_py(py, reuse)?;
                    if reuse {
                        cell.bind(py).setattr("cell_contents", now.bind(py))?;
                    }
                    v.push(now);
                }
                PyTuple::new(py, v)?.into_any().unbind()
            }
            Tree::Scalar(_, _, o) | Tree::Opaque(o) => o.clone_ref(py),
            Tree::Str(s) => PyString::new(py, s).into_any().unbind(),
            Tree::Seq {
                tuple,
                items,
                source,
            } => {
                let v = items
                    .iter()
                    .map(|i| i.to_py(py, reuse))
                    .collect::<PyResult<Vec<_>>>()?;
                // the function's own list, when it still holds these objects (so that entries
                // it rebinds are seen by `refresh`)
                if let Some(l) = source.as_ref().filter(|_| reuse) {
                    let l = l.bind(py);
                    if l.len()? == v.len()
                        && items
                            .iter()
                            .zip(&v)
                            .enumerate()
                            .all(|(i, (t, x))| l.get_item(i).is_ok_and(|y| same_entry(t, &y, x)))
                    {
                        return Ok(l.clone().unbind());
                    }
                }
                if *tuple {
                    PyTuple::new(py, v)?.into_any().unbind()
                } else {
                    PyList::new(py, v)?.into_any().unbind()
                }
            }
            Tree::Dict(e, source) => {
                let v = e
                    .iter()
                    .map(|(_, _, t)| t.to_py(py, reuse))
                    .collect::<PyResult<Vec<_>>>()?;
                // (as a list's)
                if let Some(d) = source.as_ref().filter(|_| reuse) {
                    let d = d.bind(py).cast::<PyDict>()?;
                    if d.len() == v.len()
                        && e.iter().zip(&v).all(|((k, _, t), x)| {
                            d.get_item(k.bind(py))
                                .ok()
                                .flatten()
                                .is_some_and(|y| same_entry(t, &y, x))
                        })
                    {
                        return Ok(d.clone().into_any().unbind());
                    }
                }
                let d = PyDict::new(py);
                for ((k, _, _), x) in e.iter().zip(v) {
                    d.set_item(k.bind(py), x)?;
                }
                d.into_any().unbind()
            }
            Tree::Struct(o, f) => {
                let obj = if reuse {
                    o.bind(py).clone()
                } else {
                    py.import("copy")?.call_method1("copy", (o.bind(py),))?
                };
                // `object.__setattr__`: a frozen dataclass's fields are set as its copy is made
                let set = py
                    .import("builtins")?
                    .getattr("object")?
                    .getattr("__setattr__")?;
                for (n, v) in f {
                    set.call1((&obj, n.as_str(), v.to_py(py, reuse)?))?;
                }
                obj.unbind()
            }
        })
    }

    /// Read the arrays again from the objects they came from (after a function changed them).
    pub fn refresh(&mut self, py: Python<'_>) -> PyResult<()> {
        match self {
            Tree::Array(d, Some(o)) => *d = o.borrow(py).a.clone(),
            Tree::Tensor(d, s, Some(o)) => {
                let b = o.borrow(py);
                *d = b.a.clone();
                *s = b.shape.clone();
            }
            Tree::Cells(c) => {
                for (cell, v) in c {
                    // (`y += x` changes the object; `y = y + x` rebinds the name)
                    refresh_entry(v, &cell.bind(py).getattr("cell_contents")?)?;
                }
            }
            Tree::Seq { items, source, .. } => {
                let live = source.as_ref().map(|l| l.bind(py));
                if let Some(l) = live {
                    if l.len()? != items.len() {
                        return Err(resized("list"));
                    }
                }
                for (i, v) in items.iter_mut().enumerate() {
                    match live {
                        Some(l) => refresh_entry(v, &l.get_item(i)?)?,
                        None => v.refresh(py)?,
                    }
                }
            }
            Tree::Dict(e, source) => {
                let live = match source {
                    Some(d) => Some(d.bind(py).cast::<PyDict>()?.clone()),
                    None => None,
                };
                if live.as_ref().is_some_and(|d| d.len() != e.len()) {
                    return Err(resized("dict"));
                }
                for (k, _, v) in e {
                    match live.as_ref().map(|d| d.get_item(k.bind(py))).transpose()? {
                        Some(Some(now)) => refresh_entry(v, &now)?,
                        Some(None) => return Err(resized("dict")),
                        None => v.refresh(py)?,
                    }
                }
            }
            Tree::Struct(o, f) => {
                for (n, v) in f {
                    refresh_entry(v, &o.bind(py).getattr(n.as_str())?)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Write the arrays back into the objects they came from (the caller's arguments after a
    /// frozen call).
    pub fn write_back(&self, py: Python<'_>) -> PyResult<()> {
        match self {
            Tree::Array(d, Some(o)) => o.borrow_mut(py).a = d.clone(),
            Tree::Tensor(d, s, Some(o)) => {
                let mut b = o.borrow_mut(py);
                b.a = d.clone();
                b.shape = s.clone();
            }
            // an entry the function rebound gets a new object in its container, on replays too
            Tree::Cells(c) => {
                for (cell, v) in c {
                    match rebound_object(py, v)? {
                        Some(x) => cell.bind(py).setattr("cell_contents", x)?,
                        None => v.write_back(py)?,
                    }
                }
            }
            Tree::Seq {
                items,
                source,
                tuple,
            } => {
                for (i, v) in items.iter().enumerate() {
                    match (rebound_object(py, v)?, source) {
                        (Some(x), Some(l)) if !*tuple => l.bind(py).set_item(i, x)?,
                        _ => v.write_back(py)?,
                    }
                }
            }
            Tree::Dict(e, source) => {
                for (k, _, v) in e {
                    match (rebound_object(py, v)?, source) {
                        (Some(x), Some(o)) => o.bind(py).set_item(k.bind(py), x)?,
                        _ => v.write_back(py)?,
                    }
                }
            }
            Tree::Struct(o, f) => {
                for (n, v) in f {
                    match rebound_object(py, v)? {
                        Some(x) => o.bind(py).setattr(n.as_str(), x)?,
                        None => v.write_back(py)?,
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The plain Python values (numbers, strings), in traversal order: what must not differ
    /// between a loop's iterations or a branch's two sides, since only arrays can vary per lane.
    pub fn plain_values(&self, out: &mut Vec<String>) {
        match self {
            Tree::Scalar(tag, bits, _) => out.push(format!("{tag}:{bits}")),
            Tree::Str(s) => out.push(format!("str:{s}")),
            Tree::Seq { items, .. } => items.iter().for_each(|i| i.plain_values(out)),
            Tree::Dict(e, _) => e.iter().for_each(|(_, _, v)| v.plain_values(out)),
            Tree::Struct(_, f) => f.iter().for_each(|(_, v)| v.plain_values(out)),
            Tree::Cells(c) => c.iter().for_each(|(_, v)| v.plain_values(out)),
            _ => {}
        }
    }

    /// Make every literal array in the tree opaque (one evaluated value): Dr.Jit's
    /// `freeze(auto_opaque=False)`, under which no input's value is baked into a recording.
    /// `write_back` then hands the opaque arrays to the caller's objects, as `make_opaque` would.
    pub fn opaque_literals(&mut self) -> PyResult<()> {
        match self {
            Tree::Array(d, _) | Tree::Tensor(d, _, _)
                if kiln_core::literal_value(crate::each!(&*d, x => x.id())).is_some() =>
            {
                *d = crate::each!(&*d, x => crate::errors::guard(|| {
                    crate::dynarray::IntoDyn::into_dyn(kiln::make_opaque(x))
                })?);
            }
            Tree::Cells(c) => {
                for (_, v) in c {
                    v.opaque_literals()?;
                }
            }
            Tree::Seq { items, .. } => {
                for i in items {
                    i.opaque_literals()?;
                }
            }
            Tree::Dict(e, _) => {
                for (_, _, v) in e {
                    v.opaque_literals()?;
                }
            }
            Tree::Struct(_, f) => {
                for (_, v) in f {
                    v.opaque_literals()?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The objects the tree keys by address (`Opaque` objects without weak references): a
    /// recording keyed by one keeps it alive, or a new object at the same address would replay
    /// the old one's recording.
    pub fn opaques(&self, py: Python<'_>, out: &mut Vec<Py<PyAny>>) {
        match self {
            Tree::Opaque(o) if identity(o.bind(py)).is_err() => out.push(o.clone_ref(py)),
            Tree::Cells(c) => c.iter().for_each(|(_, v)| v.opaques(py, out)),
            Tree::Seq { items, .. } => items.iter().for_each(|i| i.opaques(py, out)),
            Tree::Dict(e, _) => e.iter().for_each(|(_, _, v)| v.opaques(py, out)),
            Tree::Struct(_, f) => f.iter().for_each(|(_, v)| v.opaques(py, out)),
            _ => {}
        }
    }

    /// The positions (among the tree's array and tensor leaves, in traversal order) of those
    /// the function rebound in a container (without an object after [`Tree::refresh`]).
    pub fn rebound(&self, out: &mut Vec<usize>) {
        let mut at = 0usize;
        self.each_leaf(&mut |t| {
            if matches!(t, Tree::Array(_, None) | Tree::Tensor(_, _, None)) {
                out.push(at);
            }
            at += 1;
        });
    }

    /// Mark the arrays at `positions` (as [`Tree::rebound`] counts them, ascending) as rebound,
    /// so that [`Tree::write_back`] gives their containers new objects instead of writing into
    /// the objects the caller holds (a replay repeats the recording's rebinding).
    pub fn mark_rebound(&mut self, positions: &[usize]) {
        let mut at = 0usize;
        self.each_leaf_mut(&mut |t| {
            if positions.binary_search(&at).is_ok() {
                match t {
                    Tree::Array(_, o) => *o = None,
                    Tree::Tensor(_, _, o) => *o = None,
                    _ => {}
                }
            }
            at += 1;
        });
    }

    fn each_leaf(&self, f: &mut dyn FnMut(&Tree)) {
        match self {
            Tree::Array(..) | Tree::Tensor(..) => f(self),
            Tree::Cells(c) => c.iter().for_each(|(_, v)| v.each_leaf(f)),
            Tree::Seq { items, .. } => items.iter().for_each(|i| i.each_leaf(f)),
            Tree::Dict(e, _) => e.iter().for_each(|(_, _, v)| v.each_leaf(f)),
            Tree::Struct(_, fs) => fs.iter().for_each(|(_, v)| v.each_leaf(f)),
            _ => {}
        }
    }

    fn each_leaf_mut(&mut self, f: &mut dyn FnMut(&mut Tree)) {
        match self {
            Tree::Array(..) | Tree::Tensor(..) => f(self),
            Tree::Cells(c) => c.iter_mut().for_each(|(_, v)| v.each_leaf_mut(f)),
            Tree::Seq { items, .. } => items.iter_mut().for_each(|i| i.each_leaf_mut(f)),
            Tree::Dict(e, _) => e.iter_mut().for_each(|(_, _, v)| v.each_leaf_mut(f)),
            Tree::Struct(_, fs) => fs.iter_mut().for_each(|(_, v)| v.each_leaf_mut(f)),
            _ => {}
        }
    }

    /// The arrays, in traversal order.
    pub fn arrays(&self, out: &mut Vec<Dyn>) {
        self.each_leaf(&mut |t| {
            if let Tree::Array(d, _) | Tree::Tensor(d, _, _) = t {
                out.push(d.clone());
            }
        });
    }
}

/// A frozen function changed the length of a container it was given.
fn resized(what: &str) -> PyErr {
    crate::errors::value_error(format!(
        "a frozen function added or removed items of a {what} among its arguments (or captured, or returned by state_fn); a replay cannot repeat that (it replays array values and the entries the function rebinds): keep such containers outside the function, or return what it builds"
    ))
}

/// Whether `now`, the entry of a caller's container, is what `to_py` made of `t` (`made`): the
/// same object, or an equal string (strings are not kept as objects).
fn same_entry(t: &Tree, now: &Bound<PyAny>, made: &Py<PyAny>) -> bool {
    now.is(made)
        || matches!(t, Tree::Str(s) if now
            .cast::<PyString>()
            .is_ok_and(|n| n.to_cow().is_ok_and(|n| n == s.as_str())))
}

/// Refresh an entry of a list or dict the function may have rebound (`state["w"] = w + x`):
/// the same array object, changed in place, is read; another array is taken as the entry's new
/// value (written back into the container).
fn refresh_entry(v: &mut Tree, now: &Bound<PyAny>) -> PyResult<()> {
    match &*v {
        Tree::Array(_, o) if o.as_ref().is_none_or(|o| now.as_ptr() != o.as_ptr()) => {
            if let Ok(a) = now.cast::<ArrayBase>() {
                *v = Tree::Array(a.borrow().a.clone(), None);
                return Ok(());
            }
        }
        Tree::Tensor(_, _, o) if o.as_ref().is_none_or(|o| now.as_ptr() != o.as_ptr()) => {
            if let Ok(t) = now.cast::<TensorBase>() {
                let t = t.borrow();
                *v = Tree::Tensor(t.a.clone(), t.shape.clone(), None);
                return Ok(());
            }
        }
        _ => {}
    }
    v.refresh(now.py())
}

/// A new object for an entry the function rebound (`Array`/`Tensor` without an object), to put
/// into its container; None for anything else (written back into its own objects).
fn rebound_object(py: Python<'_>, v: &Tree) -> PyResult<Option<Py<PyAny>>> {
    Ok(match v {
        Tree::Array(d, None) => Some(wrap(py, d.clone())?),
        Tree::Tensor(d, s, None) => Some(wrap_tensor(py, d.clone(), s.clone())?),
        _ => None,
    })
}

/// The fields kiln looks into: a dataclass's, or the keys of Dr.Jit's `DRJIT_STRUCT`.
fn struct_fields(x: &Bound<PyAny>) -> PyResult<Option<Vec<String>>> {
    let cls = x.get_type();
    if let Ok(s) = cls.getattr("DRJIT_STRUCT") {
        let d = s.cast::<PyDict>()?;
        return Ok(Some(d.keys().iter().map(|k| k.to_string()).collect()));
    }
    if let Ok(f) = cls.getattr("__dataclass_fields__") {
        let d = f.cast::<PyDict>()?;
        return Ok(Some(d.keys().iter().map(|k| k.to_string()).collect()));
    }
    Ok(None)
}

impl Traverse for Dyn {
    fn traverse(&self, t: &mut Traversal) {
        each!(self, a => a.traverse(t))
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        each!(self, x => x.traverse_mut(a))
    }
}

impl Traverse for Tree {
    fn traverse(&self, t: &mut Traversal) {
        match self {
            Tree::Array(d, _) => d.traverse(t),
            Tree::Tensor(d, s, _) => {
                t.structure("tensor", s.len());
                for &n in s {
                    t.scalar("dim", n as u64);
                }
                d.traverse(t);
            }
            Tree::Cells(c) => {
                t.structure("closure", c.len());
                for (i, (_, v)) in c.iter().enumerate() {
                    t.index(i, |t| v.traverse(t));
                }
            }
            Tree::Scalar(tag, bits, _) => t.scalar(tag, *bits),
            Tree::Str(s) => t.str(s),
            Tree::Seq { tuple, items, .. } => {
                t.structure(if *tuple { "tuple" } else { "list" }, items.len());
                for (i, v) in items.iter().enumerate() {
                    t.index(i, |t| v.traverse(t));
                }
            }
            Tree::Dict(e, _) => {
                t.structure("dict", e.len());
                for (_, k, v) in e {
                    t.entry(k, |t| v.traverse(t));
                }
            }
            Tree::Struct(o, f) => {
                let name = crate::gil::attach(|py| {
                    o.bind(py)
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                });
                t.str(&name);
                t.structure("struct", f.len());
                for (n, v) in f {
                    t.entry(n, |t| v.traverse(t));
                }
            }
            Tree::Opaque(o) => {
                let (name, id) = crate::gil::attach(|py| {
                    let b = o.bind(py);
                    let name = b
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default();
                    (name, identity(b))
                });
                t.str(&name);
                match id {
                    Ok(serial) => t.scalar("object", serial),
                    Err(address) => t.scalar("object at", address),
                }
            }
        }
    }
    fn traverse_mut(&mut self, a: &mut Assign) {
        match self {
            Tree::Array(d, _) | Tree::Tensor(d, _, _) => d.traverse_mut(a),
            Tree::Cells(c) => c.iter_mut().for_each(|(_, v)| v.traverse_mut(a)),
            Tree::Seq { items, .. } => items.iter_mut().for_each(|i| i.traverse_mut(a)),
            Tree::Dict(e, _) => e.iter_mut().for_each(|(_, _, v)| v.traverse_mut(a)),
            Tree::Struct(_, f) => f.iter_mut().for_each(|(_, v)| v.traverse_mut(a)),
            _ => {}
        }
    }
}
