//! Not written yet (issue 5 work in progress).
