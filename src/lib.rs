pub use kiln_core;
