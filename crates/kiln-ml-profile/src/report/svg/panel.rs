//! What every panel of the picture shares: its width, its fonts, the label column on its
//! left, and the frame drawn where it has nothing to show.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The picture's width; every panel spans it.
pub(super) const WIDTH: u32 = 1400;
/// The column left of each panel's axes, for row names and tick labels.
pub(super) const Y_LABEL_WIDTH: u32 = 120;
pub(super) const FONT: &str = "sans-serif";

/// What drawing on a backend returns.
pub(super) type Drawn<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// A framed panel with its caption and a note on what it lacks. The note says what the input
/// does not hold, never why: the picture cannot tell a missing source from a window with no
/// samples.
pub(super) fn no_data<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    note: &str,
) -> Drawn<DB> {
    let (width, height) = area.dim_in_pixel();
    let (width, height) = (width as i32, height as i32);
    let frame = ShapeStyle::from(BLACK.mix(0.3)).stroke_width(1);
    area.draw(&Rectangle::new(
        [(Y_LABEL_WIDTH as i32, 24), (width - 20, height - 10)],
        frame,
    ))?;
    let center = TextStyle::from((FONT, 16).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    area.draw_text(caption, &center, (width / 2, 4))?;
    let grey = BLACK.mix(0.6);
    let style = TextStyle::from((FONT, 15).into_font())
        .color(&grey)
        .pos(Pos::new(HPos::Center, VPos::Center));
    area.draw_text(note, &style, (width / 2, height / 2))
}

/// A time on the profile's clock, in the picture's unit (seconds).
pub(super) fn seconds(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64()
}
