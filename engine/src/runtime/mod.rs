//! The runtime: host buffers, asynchronous dispatch, the interrupt flag and host callbacks.

pub mod buffer;

pub use buffer::Buffer;
