// A queue read by one async iterator: items pushed before the reader asks are kept; fail() ends
// the iteration with an error after what was pushed before it.
export class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiting: { resolve: (result: IteratorResult<T>) => void; reject: (error: Error) => void } | null = null;
  private ended = false;
  private error: Error | null = null;

  push(item: T) {
    if (this.ended) return;
    if (this.waiting) {
      const { resolve } = this.waiting;
      this.waiting = null;
      resolve({ value: item, done: false });
    } else {
      this.items.push(item);
    }
  }

  end() {
    this.finish(null);
  }

  fail(error: Error) {
    this.finish(error);
  }

  private finish(error: Error | null) {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    if (this.waiting) {
      const { resolve, reject } = this.waiting;
      this.waiting = null;
      if (error) reject(error);
      else resolve({ value: undefined as never, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length) return Promise.resolve({ value: this.items.shift() as T, done: false });
        if (this.ended) {
          return this.error ? Promise.reject(this.error) : Promise.resolve({ value: undefined as never, done: true });
        }
        return new Promise((resolve, reject) => { this.waiting = { resolve, reject }; });
      },
      return: () => {
        this.finish(null);
        this.items = [];
        return Promise.resolve({ value: undefined as never, done: true });
      },
    };
  }
}
