//! The timeline picture: where each step's time went, above what the device and the host were
//! doing meanwhile, on one time axis.

mod device;
#[cfg(test)]
mod fixtures;
mod lines;
mod page;
mod panel;
mod phases;
mod window;

pub use page::write_timeline_svg;
