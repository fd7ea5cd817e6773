//! The runtime: host buffers, asynchronous dispatch on a device worker, the interrupt
//! flag and host callbacks.

pub mod buffer;
pub mod callbacks;
pub mod dispatch;
pub mod interrupt;

pub use buffer::Buffer;
pub use dispatch::{barrier, DeviceArray};
