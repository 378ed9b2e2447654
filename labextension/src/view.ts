/**
 * The autocomp result view: the live widget when its model exists, the static
 * HTML — under a one-line "snapshot" banner — when it does not.
 *
 * `%%autocomp` outputs carry:
 *   - `application/vnd.jupyter.widget-view+json`: the standard ipywidgets view
 *     (Notebook 7 without this extension, VS Code, any widget frontend render it);
 *   - `application/vnd.autocomp.view+json`: the same `{model_id, version_major,
 *     version_minor}` plus `kept`, the versions kept from the Tune tab;
 *   - `text/html`: every tab's content as static HTML/SVG (kept versions included);
 *   - `text/plain`: one line.
 * JupyterLab with this extension renders the autocomp type (ranked ahead of the
 * widget type) with the renderer below: it shows the static HTML at once,
 * renders the widget view through the notebook's own ipywidgets renderer
 * (hidden), and swaps to the widget as soon as the view exists. When the widget
 * manager reports the model missing (a reopened notebook, a new kernel) the
 * static HTML stays, with its banner: no "Error displaying widget: model not found".
 *
 * Reload with a live kernel: outputs render from the saved notebook before the
 * notebook's widget manager exists. ipywidgets then hands its manager to the
 * widget renderers that are direct children of an output (jupyterlab_widgets'
 * registerWidgetManager), not to the one nested here, and replaces the
 * placeholder widget factory in the notebook's registry with one bound to the
 * manager. So once the session is ready, the renderer waits for that factory
 * and renders the live view again through it: the manager restores the models
 * from the kernel (`jupyter.widget.control` comm, ipywidgets 8) and the live
 * controls come back. Without a kernel the widget renderer reports the model
 * missing and the snapshot stays. A view made live that way then reattaches its
 * output to the kernel's display updates (`reattach`), so versions kept after the
 * reload reach the saved output too.
 *
 * Kept versions: when the output carries `kept`, the renderer saves it in the
 * cell's metadata (`autocomp.kept`), so it is saved with the notebook; when the
 * cell shows a new live view without them (the cell ran again, in this kernel or
 * a new one), it hands them back to the kernel (`restore_kept`, a silent execute).
 */
import { IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { Panel, Widget } from '@lumino/widgets';

export const VIEW_MIME = 'application/vnd.autocomp.view+json';
export const WIDGET_VIEW_MIME = 'application/vnd.jupyter.widget-view+json';
export const HTML_MIME = 'text/html';
/** Ahead of the ipywidgets view (-10) and of text/html. */
export const VIEW_RANK = -20;

/** Where the renderer stands: static HTML shown, live widget shown, or no live view possible. */
export type ViewState = 'static' | 'live' | 'static-only';

/** How long a reloaded view waits for the notebook's widget manager after its session is ready. */
const REBIND_WAIT_MS = 30000;
const REBIND_POLL_MS = 100;

export const SNAPSHOT_BANNER =
  'Snapshot: this output was saved with the notebook and is not live — run the cell for sliders and A/B.';

/** A kept version, as the kernel writes it (autocomp_jupyter/ui/live.py: kept_records). */
export type KeptRecord = { name?: string; kernel?: string; [key: string]: unknown };

/** The Python statement that has the kernel send view `modelId`'s output again, and its later updates, to this page. */
export function reattachCode(modelId: string): string {
  return `import autocomp_jupyter.ui.live as _autocomp_live\n_autocomp_live.reattach(${JSON.stringify(modelId)})`;
}

/** The Python statement that hands saved kept versions back to the live view `modelId`. */
export function restoreCode(modelId: string, kept: KeptRecord[]): string {
  return (
    'import json as _autocomp_json, autocomp_jupyter.ui.live as _autocomp_live\n' +
    `_autocomp_live.restore_kept(${JSON.stringify(modelId)}, _autocomp_json.loads(${JSON.stringify(JSON.stringify(kept))}))`
  );
}

export class AutocompViewRenderer extends Panel implements IRenderMime.IRenderer {
  constructor(
    private readonly registry: IRenderMimeRegistry,
    private readonly notebook: NotebookPanel | null = null
  ) {
    super();
    this.addClass('autocomp-view');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this.disconnect();
    for (const child of [...this.widgets]) {
      child.dispose();
    }
    this.staticView = null;
    this.liveView = null;
    this.liveModel = null;
    this.banner = null;
    const source = model.data[VIEW_MIME] as { model_id?: string; kept?: KeptRecord[] } | undefined;
    this.modelId = source?.model_id || '';
    this.kept = Array.isArray(source?.kept) ? source!.kept! : [];
    this.restoreAsked = false;
    if (this.kept.length) {
      // after layout: the renderer is inside its cell only once attached
      requestAnimationFrame(() => this.saveKept());
    }
    const html = model.data[HTML_MIME];
    if (typeof html === 'string' && this.registry.getFactory(HTML_MIME)) {
      this.banner = new Widget();
      this.banner.addClass('autocomp-snapshot-banner');
      this.banner.node.textContent = SNAPSHOT_BANNER;
      this.addWidget(this.banner);
      this.staticView = this.registry.createRenderer(HTML_MIME);
      this.staticView.addClass('autocomp-view-static');
      this.addWidget(this.staticView);
      await this.staticView.renderModel(
        new MimeModel({ data: { [HTML_MIME]: html }, trusted: model.trusted, metadata: model.metadata })
      );
    }
    if (!source || !source.model_id || !this.registry.getFactory(WIDGET_VIEW_MIME)) {
      this.setState('static-only');
      return;
    }
    this.liveModel = new MimeModel({
      data: { [WIDGET_VIEW_MIME]: { model_id: source.model_id, version_major: (source as any).version_major, version_minor: (source as any).version_minor } },
      trusted: model.trusted,
      metadata: model.metadata
    });
    const factory = this.registry.getFactory(WIDGET_VIEW_MIME);
    const rendered = this.renderLive();
    void this.rebindWhenManagerArrives(factory, this.liveModel);
    await rendered;
  }

  /** Render the widget view (hidden until it exists) through the registry's current widget factory. */
  private async renderLive(): Promise<void> {
    const model = this.liveModel;
    if (!model || this.isDisposed) {
      return;
    }
    this.disconnect();
    this.liveView?.dispose();
    const live = this.registry.createRenderer(WIDGET_VIEW_MIME);
    live.addClass('autocomp-view-live');
    live.hide();
    this.addWidget(live);
    this.liveView = live;
    // The ipywidgets renderer adds the view as a child widget once the model is
    // found, or writes an error text when the restored manager has no such model.
    this.observer = new MutationObserver(() => this.check());
    this.observer.observe(live.node, { childList: true, characterData: true, subtree: false });
    this.setState('static');
    await live.renderModel(model);
    this.check();
  }

  /**
   * The notebook's widget manager is registered once its session is ready, after
   * a reloaded notebook's outputs rendered: when the registry's widget factory
   * changes from the one the live view was made with (the placeholder without a
   * manager), render the live view again through the new one.
   */
  private async rebindWhenManagerArrives(
    used: IRenderMime.IRendererFactory | undefined,
    model: IRenderMime.IMimeModel
  ): Promise<void> {
    const session = this.notebook?.sessionContext;
    if (!session) {
      return;
    }
    try {
      await session.ready;
    } catch {
      return; // no kernel: the snapshot stays
    }
    for (let waited = 0; waited < REBIND_WAIT_MS; waited += REBIND_POLL_MS) {
      if (this.isDisposed || this.liveModel !== model || this.node.dataset.autocompView !== 'static') {
        return; // re-rendered, live already, or the model is gone for good
      }
      const factory = this.registry.getFactory(WIDGET_VIEW_MIME);
      if (factory && factory !== used) {
        this.rebound = true;
        await this.renderLive();
        return;
      }
      await new Promise(resolve => setTimeout(resolve, REBIND_POLL_MS));
    }
  }

  dispose(): void {
    this.disconnect();
    this.reattachFuture?.dispose();
    this.reattachFuture = null;
    super.dispose();
  }

  private check(): void {
    const live = this.liveView;
    if (!live || live.isDisposed) {
      return;
    }
    const children = (live as Panel).widgets;
    if (children && children.length > 0) {
      live.show();
      this.staticView?.hide();
      this.banner?.hide();
      this.setState('live');
      this.restoreKept();
      if (this.rebound) {
        this.reattach();
      }
    } else if ((live.node.textContent || '').startsWith('Error displaying widget')) {
      // The model is gone for good (reopened notebook, new kernel): the static view stays.
      this.disconnect();
      live.dispose();
      this.liveView = null;
      this.staticView?.show();
      this.banner?.show();
      this.setState('static-only');
    } else {
      live.hide();
      this.staticView?.show();
      this.banner?.show();
      this.setState('static');
    }
  }

  /** The notebook cell model this output belongs to (found by DOM containment). */
  private cellModel(): { getMetadata(k: string): unknown; setMetadata(k: string, v: unknown): void } | null {
    const cells = this.notebook?.content?.widgets ?? [];
    const cell = cells.find(c => c.node.contains(this.node));
    return cell ? (cell.model as any) : null;
  }

  private savedKept(): KeptRecord[] {
    const meta = this.cellModel()?.getMetadata('autocomp') as { kept?: KeptRecord[] } | undefined;
    return Array.isArray(meta?.kept) ? meta!.kept! : [];
  }

  /** Save the output's kept versions in the cell's metadata (only when they changed). */
  private saveKept(): void {
    const cell = this.cellModel();
    if (!cell || JSON.stringify(this.savedKept()) === JSON.stringify(this.kept)) {
      return;
    }
    const meta = (cell.getMetadata('autocomp') as Record<string, unknown>) || {};
    cell.setMetadata('autocomp', { ...meta, kept: this.kept });
  }

  /** A new live view without kept versions in a cell that saved some: hand them back. */
  private restoreKept(): void {
    if (this.restoreAsked || this.kept.length || !this.modelId) {
      return;
    }
    this.restoreAsked = true;
    const saved = this.savedKept();
    const kernel = this.notebook?.sessionContext?.session?.kernel;
    if (!saved.length || !kernel) {
      return;
    }
    kernel.requestExecute({ code: restoreCode(this.modelId, saved), silent: true, store_history: false });
  }

  /**
   * A view made live again after a reload: its output came from the saved notebook, so the
   * kernel's display updates (a kept version) reach no output of this page. Ask the kernel to
   * display the view under its display id in reply to a request whose future stays open: the
   * kernel connection then routes that display and every later update to it, and each is
   * written into this output (its snapshot and kept versions, saved with the notebook).
   */
  private reattach(): void {
    const kernel = this.notebook?.sessionContext?.session?.kernel;
    if (this.reattachFuture || !kernel || !this.modelId) {
      return;
    }
    const modelId = this.modelId;
    const future = kernel.requestExecute({ code: reattachCode(modelId), silent: false, store_history: false }, false);
    future.onIOPub = msg => {
      const type = msg.header.msg_type;
      if (type === 'display_data' || type === 'update_display_data') {
        this.replaceOutput(modelId, (msg.content as any).data, (msg.content as any).metadata);
      }
    };
    this.reattachFuture = future;
  }

  /** Put `data` in place of this cell's output that shows view `modelId`. */
  private replaceOutput(modelId: string, data: Record<string, unknown>, metadata: Record<string, unknown>): void {
    const outputs = (this.cellModel() as any)?.outputs;
    if (!outputs || !data || !data[VIEW_MIME]) {
      return;
    }
    for (let i = 0; i < outputs.length; i++) {
      const shown = outputs.get(i).data?.[VIEW_MIME] as { model_id?: string } | undefined;
      if (shown?.model_id === modelId) {
        outputs.set(i, { output_type: 'display_data', data, metadata: metadata || {} });
        return;
      }
    }
  }

  private setState(state: ViewState): void {
    this.node.dataset.autocompView = state;
  }

  private disconnect(): void {
    this.observer?.disconnect();
    this.observer = null;
  }

  private staticView: IRenderMime.IRenderer | null = null;
  private banner: Widget | null = null;
  private modelId = '';
  private kept: KeptRecord[] = [];
  private restoreAsked = false;
  private liveView: Widget | null = null;
  private liveModel: IRenderMime.IMimeModel | null = null;
  /** Made live through the manager that arrived after the page loaded (a reload). */
  private rebound = false;
  private reattachFuture: { dispose(): void } | null = null;
  private observer: MutationObserver | null = null;
}

/** A renderer factory bound to one rendermime registry (a notebook's, or the app's)
 * and, for a notebook's, to that notebook (its cells' metadata, its kernel). */
export function viewRendererFactory(
  registry: IRenderMimeRegistry,
  notebook: NotebookPanel | null = null
): IRenderMime.IRendererFactory {
  return {
    safe: false,
    mimeTypes: [VIEW_MIME],
    defaultRank: VIEW_RANK,
    createRenderer: () => new AutocompViewRenderer(registry, notebook)
  };
}
