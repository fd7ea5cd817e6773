//! `#[derive(Pytree)]`: makes a struct a pytree node (JAX's `register_dataclass`).
//! Fields are children in declaration order; a field marked `#[pytree(static)]` is
//! auxiliary data instead (part of the tree structure and of jit's cache key; its type
//! must be `Clone + Debug + Hash + Eq + Send + Sync + 'static`). Also implements
//! `jax::tree::Args<S>` for `S` and `&S`, so the struct can be passed to jitted functions.
//! The generated code names the engine as `::jax`.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Ts;
use quote::{format_ident, quote};
use syn::{parse_macro_input, Data, DeriveInput, Fields, Index, Meta};

/// Derives `jax::tree::Pytree` (and `jax::tree::Args`) for a struct.
#[proc_macro_derive(Pytree, attributes(pytree))]
pub fn derive_pytree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn is_static(f: &syn::Field) -> syn::Result<bool> {
    let mut st = false;
    for a in &f.attrs {
        if !a.path().is_ident("pytree") {
            continue;
        }
        match &a.meta {
            Meta::List(l) if l.tokens.to_string().trim() == "static" => st = true,
            _ => return Err(syn::Error::new_spanned(a, "expected #[pytree(static)]")),
        }
    }
    Ok(st)
}

fn expand(input: &DeriveInput) -> syn::Result<Ts> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => &s.fields,
        _ => return Err(syn::Error::new_spanned(name, "#[derive(Pytree)] supports structs only")),
    };
    // (accessor, field name text, binding, is static, type)
    let mut items = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let (acc, text): (Ts, String) = match &f.ident {
            Some(id) => (quote!(#id), id.to_string()),
            None => {
                let ix = Index::from(i);
                (quote!(#ix), i.to_string())
            }
        };
        items.push((acc, text, format_ident!("__f{}", i), is_static(f)?, f.ty.clone()));
    }
    let (ig, tg, wc) = input.generics.split_for_impl();
    let child_names: Vec<&String> = items.iter().filter(|x| !x.3).map(|x| &x.1).collect();
    let n_children = child_names.len();
    let n_statics = items.len() - n_children;

    let mut flatten = Vec::new();
    let mut rebuild = Vec::new();
    let (mut ci, mut si) = (0usize, 0usize);
    for (acc, text, bind, st, ty) in &items {
        if *st {
            flatten.push(quote! {
                statics.push((#text, ::jax::tree::StaticValue::new(&self.#acc)));
            });
            rebuild.push(quote! { let #bind: #ty = node.statics[#si].1.get::<#ty>()?; });
            si += 1;
        } else {
            flatten.push(quote! {
                children.push(flat.child(&self.#acc));
            });
            rebuild.push(quote! {
                let #bind: #ty = <#ty as ::jax::tree::Pytree>::unflatten(&node.children[#ci], leaves)?;
            });
            ci += 1;
        }
    }
    let binds: Vec<&syn::Ident> = items.iter().map(|x| &x.2).collect();
    let construct = match fields {
        Fields::Named(_) => {
            let accs: Vec<&Ts> = items.iter().map(|x| &x.0).collect();
            quote!(#name { #(#accs: #binds),* })
        }
        Fields::Unnamed(_) => quote!(#name(#(#binds),*)),
        Fields::Unit => quote!(#name),
    };

    Ok(quote! {
        impl #ig ::jax::tree::Pytree for #name #tg #wc {
            fn flatten(&self, flat: &mut ::jax::tree::Flat) {
                let mut children: ::std::vec::Vec<::jax::tree::TreeDef> = ::std::vec::Vec::new();
                let mut statics: ::std::vec::Vec<(&'static str, ::jax::tree::StaticValue)> = ::std::vec::Vec::new();
                #(#flatten)*
                flat.treedef = ::jax::tree::TreeDef::Custom(::std::boxed::Box::new(::jax::tree::CustomNode {
                    type_name: ::std::any::type_name::<Self>(),
                    fields: ::std::vec![#(#child_names),*],
                    statics,
                    children,
                }));
            }
            fn unflatten(
                def: &::jax::tree::TreeDef,
                leaves: &mut dyn ::std::iter::Iterator<Item = ::jax::tree::Array>,
            ) -> ::jax::Result<Self> {
                let node = ::jax::tree::custom_node(def, ::std::any::type_name::<Self>(), #n_children, #n_statics)?;
                let _ = (&node, &leaves);
                #(#rebuild)*
                ::std::result::Result::Ok(#construct)
            }
        }
        impl #ig ::jax::tree::Args<#name #tg> for #name #tg #wc {
            fn flatten_args(self, flat: &mut ::jax::tree::Flat) {
                ::jax::tree::Pytree::flatten(&self, flat)
            }
        }
        impl #ig ::jax::tree::Args<#name #tg> for &#name #tg #wc {
            fn flatten_args(self, flat: &mut ::jax::tree::Flat) {
                ::jax::tree::Pytree::flatten(self, flat)
            }
        }
    })
}
