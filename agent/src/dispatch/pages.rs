//! The membership and the cells, a page at a time (see [`crate::wire::page`]): ten thousand
//! members with 16 KiB records, or a thousand cells' summaries, do not fit one frame.

use super::Api;
use crate::state::mesh::view;
use crate::wire::api::Response;
use crate::wire::page;

impl Api {
    /// A page of the members whose names sort after `after`.
    pub(crate) async fn handle_nodes(&self, after: Option<String>, limit: u32) -> Response {
        let members = self.node.members().await;
        // Members come sorted by name, one per name.
        let views = members
            .iter()
            .skip_while(|m| after.as_deref().is_some_and(|a| m.name.as_str() <= a))
            .map(view::node_view);
        let (nodes, next_after) = page::take_page(views, limit, |n| n.name.clone());
        Response::Nodes { nodes, next_after }
    }

    /// A page of the cells whose names sort after `after`.
    pub(crate) fn handle_cell_list(&self, after: Option<String>, limit: u32) -> Response {
        // The table lists cells by name.
        let cells = self.node.cells.list().into_iter().skip_while(|c| {
            after
                .as_deref()
                .is_some_and(|a| c.summary.cell.as_str() <= a)
        });
        let (cells, next_after) = page::take_page(cells, limit, |c| c.summary.cell.clone());
        Response::CellList { cells, next_after }
    }
}
