//! Where experiences are kept: [`FileExperienceStore`], the markdown file
//! (the embedded default), or [`PgExperienceStore`], a table several hosts
//! share. Both behave the same: an append is all or nothing and never loses
//! another writer's, a rating is counted exactly once, and the list keeps
//! insertion order.

mod file;
mod postgres;

pub use file::FileExperienceStore;
pub use postgres::PgExperienceStore;

use super::{Experience, ExperienceError, Rating};
use crate::scope::Visible;
use async_trait::async_trait;

/// Durable storage of experiences.
#[async_trait]
pub trait ExperienceStore: Send + Sync {
    /// Every experience, in insertion order.
    async fn list(&self) -> Result<Vec<Experience>, ExperienceError>;

    /// Adds `new` after the others, all or none: an id already stored (or
    /// given twice) is [`ExperienceError::DuplicateId`], an empty id or
    /// rule [`ExperienceError::Invalid`].
    async fn append(&self, new: Vec<Experience>) -> Result<(), ExperienceError>;

    /// Counts one `rating` for the experience `id` (and its success rate
    /// with it); returns it as rated.
    async fn rate(&self, id: &str, rating: Rating) -> Result<Experience, ExperienceError>;

    /// Counts one more use of each experience of `ids` (ids no longer
    /// stored are passed over: a use is no reason to fail a run).
    async fn record_use(&self, ids: &[String]) -> Result<(), ExperienceError>;

    /// Removes the experience `id`; returns it.
    async fn remove(&self, id: &str) -> Result<Experience, ExperienceError>;

    /// Whether there are none (a new run then makes no tagging call).
    async fn is_empty(&self) -> Result<bool, ExperienceError> {
        Ok(self.list().await?.is_empty())
    }

    /// The experiences sharing tags with `intent` and `state`, best first,
    /// at most `k`, ranked as [`rank`](super::rank) does; of every scope.
    async fn relevant(
        &self,
        intent: &[String],
        state: &[String],
        k: usize,
    ) -> Result<Vec<Experience>, ExperienceError> {
        self.relevant_in(&Visible::everything(), intent, state, k).await
    }

    /// [`relevant`](Self::relevant) among the experiences of the scopes
    /// `visible` sees.
    async fn relevant_in(
        &self,
        visible: &Visible,
        intent: &[String],
        state: &[String],
        k: usize,
    ) -> Result<Vec<Experience>, ExperienceError> {
        let mut all = self.list().await?;
        all.retain(|e| visible.sees(&e.scope));
        Ok(super::rank(&all, intent, state, k).into_iter().cloned().collect())
    }

    /// Where the experiences are, for messages (a path, or a database URL
    /// without its password).
    fn describe(&self) -> String;
}

/// `all` in the markdown form [`FileExperienceStore`] reads.
pub fn to_markdown(all: &[Experience]) -> String {
    file::render("", all)
}

/// Refuses a batch with an experience that cannot be stored
/// ([`Experience::check`]), or an id given twice.
fn check_new(new: &[Experience]) -> Result<(), ExperienceError> {
    for (i, e) in new.iter().enumerate() {
        e.check()?;
        if new[..i].iter().any(|o| o.id == e.id) {
            return Err(ExperienceError::DuplicateId(e.id.clone()));
        }
    }
    Ok(())
}
